// One rank-based byte-pair-encoding engine for every BPE tokenizer in tiktoken's model: a rank table
// (token bytes -> rank, the rank being the token id), a pre-tokenisation regex and special tokens.
// GPT-2 (gpt2_tokenizer.h), cl100k_base, o200k_base and Llama 3 (tiktoken_vocabulary.h) are all this
// engine with different tables; the ids equal tiktoken's.
//
// Encoding (tiktoken's encode_ordinary): the text is split by the pattern (PCRE2, UTF + UCP, JIT);
// a piece that is itself a token becomes that token; otherwise its bytes are merged pairwise, at
// each step the adjacent pair whose concatenation has the lowest rank, leftmost first among equal
// ranks. The pattern is written in the syntax of tiktoken's Rust regex; `\s` and `\S` are rewritten
// to Unicode White_Space, which is what they mean there (PCRE2's own \s adds U+180E). Letter, number
// and mark classes come from PCRE2's tables (Unicode 14 for PCRE2 10.42) where tiktoken's regex
// knows newer Unicode (16 in tiktoken 1.0.22): text with characters assigned after Unicode 14 (CJK
// extensions H and I, Kawi, ...) may split differently.
//
// Invalid UTF-8 never throws: matching uses PCRE2_MATCH_INVALID_UTF, so no piece spans an invalid
// sequence and each maximal run of bytes that are not valid UTF-8 becomes a piece of its own, merged
// by rank like any other (every single byte is a token). Valid text around it is split as if the
// invalid run were the end / start of the text. decode(encode(x)) == x for every byte string x.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "odyssey/data/tokenizer.h"

namespace odyssey {

// What a tokenizer of this family is made of, as the format parsers produce it.
struct BpeVocabulary {
  std::string name;                                   // "gpt2", "cl100k_base", ...
  std::string source;                                 // the file(s) it came from, for messages
  std::vector<std::string> ranks;                     // rank (= id) -> token bytes, dense from 0
  std::string pattern;                                // pre-tokenisation regex, tiktoken's syntax
  std::vector<std::pair<std::string, int>> specials;  // literal -> id, ids not among the ranks
  std::string separator;                              // the special token between documents
};

class BpeTokenizer : public Tokenizer {
 public:
  // Checks the vocabulary (unique ranks, all 256 single bytes, special ids free, a pattern that
  // compiles) and throws odyssey::Error naming vocab.source when it is not usable.
  explicit BpeTokenizer(BpeVocabulary vocab);
  ~BpeTokenizer() override;
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // Special tokens' literals are ordinary text here, like tiktoken's encode_ordinary.
  std::vector<int> encode(std::string_view text) const override;
  // As encode(), but each special token's literal becomes its id (tiktoken's encode(text, "all")).
  std::vector<int> encode_allow_special(std::string_view text) const;
  // encode() of each document, in parallel over documents (OpenMP).
  std::vector<std::vector<int>> encode_batch(const std::vector<std::string_view>& docs) const;

  // Concatenated bytes of the tokens (a special token decodes to its literal); throws on an id that
  // is not a token.
  std::string decode(const std::vector<int>& ids) const override;
  std::string decode_one(int id) const override;
  // One past the largest id (ranks and special tokens).
  int vocab_size() const override;
  // The separator's id.
  int eot_id() const override;
  std::string name() const override;

 private:
  // Tables, compiled regex and per-thread scratch live in the .cpp, so users need no PCRE2 headers.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tiktoken-syntax pattern with `\s` / `\S` spelled out as Unicode White_Space for PCRE2 (exposed
// for tests). Throws on `\S` inside a character class, which has no such spelling.
std::string pcre2_pattern_from_tiktoken(std::string_view pattern);

}  // namespace odyssey
