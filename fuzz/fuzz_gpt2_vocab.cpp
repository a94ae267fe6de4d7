// Fuzz target: GPT-2 vocabulary files. The input is encoder.json, a NUL byte, then vocab.bpe (an input
// without NUL is encoder.json with an empty vocab.bpe). A tokenizer that loads must then encode and
// decode a short text. Anything but an odyssey::Error is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "odyssey/core/error.h"
#include "odyssey/data/gpt2_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = odyssey::fuzz::as_view(data, size);
  const size_t nul = input.find('\0');
  const std::string_view encoder = input.substr(0, nul);
  const std::string_view merges = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const std::string encoder_path = odyssey::fuzz::write_scratch("encoder.json", encoder);
  const std::string merges_path = odyssey::fuzz::write_scratch("vocab.bpe", merges);
  try {
    odyssey::Gpt2Tokenizer tok(encoder_path, merges_path);
    const std::vector<int> ids = tok.encode("Hello world, it's 2024!\n\xff");
    (void)tok.decode(ids);
  } catch (const odyssey::Error&) {
  }
  return 0;
}
