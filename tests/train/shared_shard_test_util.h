// A scratch directory every rank of a multi-rank test agrees on (rank 0 names it after its process id
// and makes it), holding one synthetic token shard train.bin of 20,000 tokens below 67 (the tiny models'
// vocabulary). Collective over world; the caller removes it (rank 0) when done.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/data/token_shard.h"

namespace odyssey {

inline std::string shared_token_shard_dir(Communicator& world, const std::string& prefix) {
  int32_t id = world.rank() == 0 ? int32_t(::getpid()) : 0;
  world.broadcast(&id, 1, DType::i32, 0);
  const std::string dir = (std::filesystem::temp_directory_path() / (prefix + std::to_string(id))).string();
  if (world.rank() == 0) {
    std::filesystem::create_directories(dir);
    std::vector<uint16_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t((i * 7919 + i / 13) % 67);
    write_token_shard(dir + "/train.bin", tokens);
  }
  world.barrier();
  return dir;
}

}  // namespace odyssey
