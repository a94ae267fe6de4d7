// Tokenizers: text <-> token ids. `bytes` maps each byte to its value (vocab 256); `gpt2`,
// `cl100k_base`, `o200k_base` and `llama3` are byte-level BPE in tiktoken's model (bpe_tokenizer.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "odyssey/core/enum_names.h"

namespace odyssey {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  virtual std::string decode_one(int id) const { return decode({id}); }
  virtual int vocab_size() const = 0;
  // The id that separates documents, or -1 when the tokenizer has none.
  virtual int eot_id() const = 0;
  virtual std::string name() const = 0;
};

// Byte-level: id = byte value, vocab 256, no end-of-text token.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

inline constexpr const char* kTokenizerNames = "bytes, gpt2, cl100k_base, o200k_base or llama3";
// The same choices as a config key's enum (data.tokenizer); make_tokenizer takes its name.
enum class TokenizerKind { bytes, gpt2, cl100k_base, o200k_base, llama3 };
inline constexpr EnumNames<TokenizerKind, 5> kTokenizerKindNames = {
    {{"bytes", TokenizerKind::bytes},
     {"gpt2", TokenizerKind::gpt2},
     {"cl100k_base", TokenizerKind::cl100k_base},
     {"o200k_base", TokenizerKind::o200k_base},
     {"llama3", TokenizerKind::llama3}}};

// True for the names of kTokenizerNames.
bool is_tokenizer_name(const std::string& name);

// $ODYSSEY_CACHE/<name> ($ODYSSEY_CACHE defaults to ./cache): where a tokenizer's files are fetched to.
std::string default_vocab_dir(const std::string& name);

// Looks a tokenizer up by name (kTokenizerNames). vocab_dir holds its files (gpt2: encoder.json +
// vocab.bpe; the others <name>.json); empty means default_vocab_dir(name). A missing file names the
// script that fetches it.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& vocab_dir = "");

}  // namespace odyssey
