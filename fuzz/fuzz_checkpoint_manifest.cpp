// Fuzz target: a checkpoint's manifest.json (format version, model config, step, data position,
// layout, file list), read and checked as resume, eval and generate read it. Anything but an
// odyssey::Error is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  odyssey::fuzz::write_scratch("manifest.json", odyssey::fuzz::as_view(data, size));
  try {
    odyssey::read_checkpoint_manifest(odyssey::fuzz::scratch_dir().string());
  } catch (const odyssey::Error&) {
  }
  return 0;
}
