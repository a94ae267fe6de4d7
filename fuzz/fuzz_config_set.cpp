// Fuzz target: `--set section.key=value` overrides (one per input line) applied over a valid base
// configuration (configs/tiny.toml's shape), then its checks. Anything but an odyssey::Error is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "odyssey/core/error.h"
#include "odyssey/train/config.h"

namespace {

constexpr const char* kBase = R"([model]
n_layer = 2
n_head = 4
d_model = 64
seq_len = 32
vocab_size = 256

[train]
steps = 10
global_batch = 4
micro_batch = 2
lr = 1e-3

[data]
train = "train_*.bin"
val = "val_*.bin"
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> overrides;
  std::string_view rest = odyssey::fuzz::as_view(data, size);
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    overrides.emplace_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  }
  try {
    const odyssey::RunConfig config = odyssey::parse_run_config(kBase, "base.toml", overrides);
    config.validate(1);
  } catch (const odyssey::Error&) {
  }
  return 0;
}
