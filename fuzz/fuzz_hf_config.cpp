// Fuzz target: a Hugging Face GPT-2 config.json as `import --from hf-gpt2` reads it (Llama's:
// fuzz_hf_llama_config.cpp). Anything but an odyssey::Error is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "odyssey/checkpoint/hf_gpt2.h"
#include "odyssey/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  odyssey::fuzz::write_scratch("config.json", odyssey::fuzz::as_view(data, size));
  try {
    const odyssey::ModelConfig config = odyssey::read_hf_gpt2_config(odyssey::fuzz::scratch_dir().string());
    config.validate();
    (void)config.num_parameters();
  } catch (const odyssey::Error&) {
  }
  return 0;
}
