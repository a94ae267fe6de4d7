// Training rows drawn from token shards, independent of the parallel layout (DESIGN.md): row i of the
// run is a window of T+1 tokens (inputs: its first T, targets: its last T). Without shuffle, row i is
// tokens[i*T, i*T+T] of the concatenated data, as llm.c reads it; with shuffle, the same windows in an
// order drawn per epoch from (seed, epoch). Epochs wrap around.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/data/token_shard.h"

namespace odyssey {

class TokenDataset {
 public:
  // pattern: a file path or a glob ("dir/train_*.bin"); files are taken in sorted order. Fails naming
  // the pattern when it matches nothing, naming file and offset for a bad shard or a token >= vocab_size,
  // and when the data holds fewer than T+1 tokens.
  TokenDataset(const std::string& pattern, int T, int vocab_size, bool shuffle, uint64_t seed);

  int seq_len() const { return T_; }
  uint64_t rows_per_epoch() const;
  uint64_t total_tokens() const;

  // Row `row` of the run (any non-negative index; epoch = row / rows_per_epoch()):
  // inputs [T] and targets [T] as int.
  void get_row(uint64_t row, int* inputs, int* targets) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  int T_;
};

}  // namespace odyssey
