// Fuzz target, structure-aware: combinations of keys of the config key table with extreme values, then
// the checks at a world size the input picks and, when they accept the config at one rank, a dry run
// (layout, model, memory check: the run built, nothing trained or written). Products and combinations
// of layout and size keys are what it is after (issue 42): any outcome but an odyssey::Error or a
// finished dry run is a finding (a signal, another exception, UB, a dry run taking seconds or
// allocating gigabytes).
// An input is a base byte (GPT-2 or Llama; the world size) and records of a key (2 bytes, an index into
// the table) and a value: for an integer key an extreme, a power of two (+-1) or raw bytes; for a
// number key an extreme double; for a choice key a word of the known choices; for a list a few integers.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "config_extremes.h"
#include "fuzz_input.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/core/error.h"
#include "odyssey/data/token_shard.h"
#include "odyssey/train/config.h"
#include "odyssey/train/trainer.h"

namespace {

using odyssey::fuzz::config_keys;
using odyssey::fuzz::extreme_integers;

// Reads the input front to back; past its end every read is 0.
struct Reader {
  const uint8_t* data;
  size_t size, at = 0;
  bool done() const { return at >= size; }
  uint8_t byte() { return at < size ? data[at++] : 0; }
  uint64_t bytes(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = v << 8 | byte();
    return v;
  }
};

const char* const kWords[] = {
    "gpt2",   "llama", "qwen2",          "none", "domino", "rows", "tokens", "zigzag", "contiguous",
    "1f1b",   "gpipe", "interleaved",    "zb1",  "int8",   "int4", "qwd",    "qgz",    "tlq",
    "tlq_hs", "cheap", "keep_attention", "full", "auto",   "ram",  "disk",   "cosine", "constant",
    "fp32",   "bf16",  "bytes",          "",     "/"};
const char* const kNumbers[] = {"0",   "-1",   "1",          "0.5",    "1e-300", "1e300", "inf", "-inf",
                                "nan", "1e-9", "2147483648", "9.3e18", "1.8e19", "4",     "1e6", "1e12"};

std::string integer_value(Reader& r) {
  const uint8_t sel = r.byte();
  const std::vector<std::string>& extremes = extreme_integers();
  if (sel < extremes.size()) return extremes[sel];
  if (sel < 128) {  // 2^k - 1, 2^k, 2^k + 1 for k in 0..63
    const int k = (sel - int(extremes.size())) % 64, d = (sel % 3) - 1;
    return std::to_string((uint64_t{1} << k) + uint64_t(int64_t(d)));
  }
  if (sel < 192) return std::to_string(sel - 128);  // small values
  return std::to_string(int64_t(r.bytes(8)));       // anything
}

std::string value_for(const nlohmann::json& like, Reader& r) {
  if (like.is_boolean()) return r.byte() & 1 ? "true" : "false";
  if (like.is_number_integer()) return integer_value(r);
  if (like.is_number()) return kNumbers[r.byte() % std::size(kNumbers)];
  if (like.is_array()) {
    std::string list;
    for (int n = 1 + r.byte() % 4; n > 0; --n) {
      if (!list.empty()) list += ',';
      list += integer_value(r);
    }
    return list;
  }
  return kWords[r.byte() % std::size(kWords)];
}

// A 32-token shard for the dry runs that open data.train (written once per process).
const std::string& train_shard() {
  static const std::string path = [] {
    const std::string p = (odyssey::fuzz::scratch_dir() / "train.bin").string();
    std::vector<uint16_t> tokens(256);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i * 7 % 256);
    odyssey::write_token_shard(p, tokens);
    return p;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const uint8_t head = r.byte();
  static const int kWorlds[] = {1, 2, 3, 4, 8, 16, 64, 1024, 1 << 20, 2147483647};
  const int world = kWorlds[(head >> 1) % std::size(kWorlds)];
  std::string base = odyssey::fuzz::base_config((head & 1) ? odyssey::fuzz::BaseModel::llama
                                                           : odyssey::fuzz::BaseModel::gpt2);
  base += "\n[data]\ntrain = \"" + train_shard() + "\"\n[checkpoint]\ndir = \"" +
          (odyssey::fuzz::scratch_dir() / "run").string() + "\"\n";
  std::vector<std::string> overrides;
  for (int records = 0; records < 8 && !r.done(); ++records) {
    const auto& [name, like] = config_keys()[r.bytes(2) % config_keys().size()];
    overrides.push_back(name + "=" + value_for(like, r));
  }
  odyssey::RunConfig config;
  try {
    config = odyssey::parse_run_config(base, "base.toml", overrides);
  } catch (const odyssey::Error&) {
    return 0;
  }
  try {
    config.validate(world);
  } catch (const odyssey::Error&) {
  }
  try {
    odyssey::SingleCommunicator one("world");
    odyssey::run_training(config, one, /*dry_run=*/true);
  } catch (const odyssey::Error&) {
  }
  return 0;
}
