// Fuzz target: the cl100k_base, o200k_base and Llama 3 tokenizers (the published files,
// $ODYSSEY_CACHE/<name>/<name>.json or ./cache/...) on arbitrary bytes. The first byte picks the
// tokenizer, the rest is the text: encode never throws and decode(encode(x)) == x, with and without
// special tokens. A mismatch aborts (a finding).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "odyssey/data/bpe_tokenizer.h"
#include "odyssey/data/tiktoken_vocabulary.h"
#include "odyssey/data/tokenizer.h"

namespace {

constexpr std::array<const char*, 3> kNames = {"cl100k_base", "o200k_base", "llama3"};

const odyssey::BpeTokenizer& tokenizer(size_t index) {
  static const std::array<std::unique_ptr<odyssey::Tokenizer>, 3> toks = [] {
    std::array<std::unique_ptr<odyssey::Tokenizer>, 3> all;
    for (size_t i = 0; i < kNames.size(); ++i)
      all[i] = odyssey::make_tiktoken_tokenizer(kNames[i], odyssey::default_vocab_dir(kNames[i]));
    return all;
  }();
  return dynamic_cast<const odyssey::BpeTokenizer&>(*toks[index]);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer(0);  // a missing file fails here, once, with odyssey::Error's message
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& tok = tokenizer(data[0] % kNames.size());
  const std::string_view text = odyssey::fuzz::as_view(data + 1, size - 1);
  if (tok.decode(tok.encode(text)) != text) {
    std::fprintf(stderr, "%s: decode(encode(x)) != x\n", tok.name().c_str());
    std::abort();
  }
  if (tok.decode(tok.encode_allow_special(text)) != text) {
    std::fprintf(stderr, "%s: decode(encode_allow_special(x)) != x\n", tok.name().c_str());
    std::abort();
  }
  return 0;
}
