// Fuzz target: the GPT-2 tokenizer (the published vocabulary, $ODYSSEY_CACHE/gpt2 or ./cache/gpt2)
// on arbitrary bytes: encode never throws and decode(encode(x)) == x, with and without special
// tokens. A mismatch aborts (a finding).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "odyssey/data/gpt2_tokenizer.h"

namespace {

const odyssey::Gpt2Tokenizer& tokenizer() {
  static const std::unique_ptr<odyssey::Gpt2Tokenizer> tok = [] {
    const char* env = std::getenv("ODYSSEY_CACHE");
    const std::string dir = std::string(env != nullptr && *env != '\0' ? env : "cache") + "/gpt2";
    return std::make_unique<odyssey::Gpt2Tokenizer>(dir + "/encoder.json", dir + "/vocab.bpe");
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();  // a missing vocabulary fails here, once, with odyssey::Error's message
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = odyssey::fuzz::as_view(data, size);
  const auto& tok = tokenizer();
  if (tok.decode(tok.encode(text)) != text) {
    std::fprintf(stderr, "decode(encode(x)) != x\n");
    std::abort();
  }
  if (tok.decode(tok.encode_allow_special(text)) != text) {
    std::fprintf(stderr, "decode(encode_allow_special(x)) != x\n");
    std::abort();
  }
  return 0;
}
