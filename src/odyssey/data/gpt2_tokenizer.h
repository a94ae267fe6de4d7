// GPT-2's byte-level BPE, reproducing tiktoken's `gpt2` encoding (and OpenAI's encoder.py / Hugging
// Face) id for id, read from the published encoder.json + vocab.bpe.
//
// Encoding: the text is split by GPT-2's pre-tokenisation regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF + UCP, JIT; \s is spelled out as Unicode White_Space, as tiktoken's Rust regex reads it),
// then each piece's bytes are merged by rank. Letter and number classes come from PCRE2's tables
// (Unicode 14 for PCRE2 10.42); tiktoken's regex knows newer Unicode (16 in tiktoken 1.0.22), so text
// with characters assigned after Unicode 14 (CJK extensions H and I, Kawi, ...) may split differently.
//
// `<|endoftext|>` (id 50256): encode() treats the literal string as ordinary text, like tiktoken's
// encode_ordinary; documents are separated by the caller appending eot_id(). encode_allow_special()
// turns the literal into id 50256.
//
// Invalid UTF-8 never throws: matching uses PCRE2_MATCH_INVALID_UTF, so no piece spans an invalid
// sequence and each maximal run of bytes that are not valid UTF-8 becomes a piece of its own, merged by
// rank like any other (byte-level BPE covers all 256 bytes). Valid text around it is split as if the
// invalid run were the end / start of the text. decode(encode(x)) == x for every byte string x.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "odyssey/data/tokenizer.h"

namespace odyssey {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Throws odyssey::Error naming the file when either is missing or malformed.
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  ~Gpt2Tokenizer() override;
  Gpt2Tokenizer(const Gpt2Tokenizer&) = delete;
  Gpt2Tokenizer& operator=(const Gpt2Tokenizer&) = delete;

  std::vector<int> encode(std::string_view text) const override;
  // As encode(), but each literal "<|endoftext|>" becomes eot_id().
  std::vector<int> encode_allow_special(std::string_view text) const;
  // encode() of each document, in parallel over documents (OpenMP).
  std::vector<std::vector<int>> encode_batch(const std::vector<std::string_view>& docs) const;

  // Concatenated bytes of the tokens (eot decodes to "<|endoftext|>"); throws on an id out of range.
  std::string decode(const std::vector<int>& ids) const override;
  std::string decode_one(int id) const override;
  int vocab_size() const override;
  int eot_id() const override;
  std::string name() const override { return "gpt2"; }

 private:
  // Tables, compiled regex and per-thread scratch live in the .cpp, so users need no PCRE2 headers.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads <vocab_dir>/encoder.json and <vocab_dir>/vocab.bpe (scripts/fetch_gpt2_vocab.sh fetches them).
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_dir);

}  // namespace odyssey
