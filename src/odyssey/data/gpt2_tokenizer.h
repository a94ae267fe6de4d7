// GPT-2's byte-level BPE, reproducing tiktoken's `gpt2` encoding (and OpenAI's encoder.py / Hugging
// Face) id for id, read from the published encoder.json + vocab.bpe and run by the shared rank-based
// engine (bpe_tokenizer.h): a token's rank is its encoder.json id, as tiktoken's loader asserts.
//
// Pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (tiktoken's).
// `<|endoftext|>` (id 50256): encode() treats the literal string as ordinary text, like tiktoken's
// encode_ordinary; documents are separated by the caller appending eot_id(). encode_allow_special()
// turns the literal into id 50256.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "odyssey/data/bpe_tokenizer.h"

namespace odyssey {

// Parses encoder.json and vocab.bpe given as text (`encoder_name` / `vocab_name` name them in
// errors, with vocab.bpe's line numbers). Checks that the merges, in order, make ids 256, 257, ...
// so that rank order and merge order agree.
BpeVocabulary parse_gpt2_vocabulary(std::string_view encoder_json, std::string_view vocab_bpe,
                                    const std::string& encoder_name, const std::string& vocab_name);

class Gpt2Tokenizer final : public BpeTokenizer {
 public:
  // Throws odyssey::Error naming the file when either is missing or malformed.
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
};

// Reads <vocab_dir>/encoder.json and <vocab_dir>/vocab.bpe (scripts/fetch_gpt2_vocab.sh fetches them).
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_dir);

}  // namespace odyssey
