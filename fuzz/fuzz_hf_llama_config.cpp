// Fuzz target: a Hugging Face Llama config.json as `import --from hf-llama` reads it, then the
// model's checks and parameter count. Anything but an odyssey::Error is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "odyssey/checkpoint/hf_llama.h"
#include "odyssey/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  odyssey::fuzz::write_scratch("config.json", odyssey::fuzz::as_view(data, size));
  try {
    const odyssey::ModelConfig config = odyssey::read_hf_llama_config(odyssey::fuzz::scratch_dir().string());
    config.validate();
    (void)config.num_parameters();
  } catch (const odyssey::Error&) {
  }
  return 0;
}
