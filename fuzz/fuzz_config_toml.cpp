// Fuzz target: a run configuration as TOML text (train --config), then its checks for 1, 2 and 4
// ranks. Anything but an odyssey::Error (a crash, another exception, UB) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "odyssey/core/error.h"
#include "odyssey/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(odyssey::fuzz::as_view(data, size));
  try {
    const odyssey::RunConfig config = odyssey::parse_run_config(text, "fuzz.toml", {});
    for (int world : {1, 2, 4}) {
      try {
        config.validate(world);
      } catch (const odyssey::Error&) {
      }
    }
  } catch (const odyssey::Error&) {
  }
  return 0;
}
