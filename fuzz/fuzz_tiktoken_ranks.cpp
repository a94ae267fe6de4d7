// Fuzz target: a tiktoken-format rank file (pat_str, special_tokens, bpe_ranks) as the cl100k_base,
// o200k_base and llama3 tokenizers read it; a file that parses is then used to encode and decode a
// piece of the input. Anything but an odyssey::Error is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "odyssey/core/error.h"
#include "odyssey/data/bpe_tokenizer.h"
#include "odyssey/data/tiktoken_vocabulary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(odyssey::fuzz::as_view(data, size));
  try {
    odyssey::BpeTokenizer tok(odyssey::parse_tiktoken_json(text, "fuzz.json", "fuzz", "<|end|>"));
    const std::string sample = text.substr(0, 64);
    if (tok.decode(tok.encode(sample)) != sample) __builtin_trap();  // a parsed vocabulary must round-trip
  } catch (const odyssey::Error&) {
  }
  return 0;
}
