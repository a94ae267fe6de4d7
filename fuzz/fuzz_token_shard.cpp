// Fuzz target: a token shard file (uint16 "gpt-2" or uint32 "llama-3" format; the magic selects),
// opened, checked against a vocabulary and read whole. Anything but an odyssey::Error is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "odyssey/core/error.h"
#include "odyssey/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = odyssey::fuzz::write_scratch("shard.bin", odyssey::fuzz::as_view(data, size));
  try {
    odyssey::TokenShard shard(path);
    uint64_t sum = 0;
    for (size_t i = 0; i < shard.size(); ++i) sum += shard[i];
    if (sum == 0 && shard.size() > 0 && shard[0] != 0) __builtin_trap();  // keeps the reads
    shard.check_vocab(50257);
  } catch (const odyssey::Error&) {
  }
  return 0;
}
