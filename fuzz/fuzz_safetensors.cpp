// Fuzz target: a safetensors file (header length, JSON header, data section), mapped and validated,
// then every tensor read as fp32 or int32 as its dtype allows. Anything but an odyssey::Error is a
// finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      odyssey::fuzz::write_scratch("model.safetensors", odyssey::fuzz::as_view(data, size));
  try {
    odyssey::SafetensorsFile file(path);
    for (const auto& t : file.tensors()) {
      try {
        file.read_f32(t.name);
      } catch (const odyssey::Error&) {
      }
      try {
        file.read_i32(t.name);
      } catch (const odyssey::Error&) {
      }
    }
  } catch (const odyssey::Error&) {
  }
  return 0;
}
