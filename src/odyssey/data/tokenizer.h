// Tokenizers: text <-> token ids. `bytes` maps each byte to its value (vocab 256); `gpt2` is GPT-2's
// byte-level BPE (issue 3).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

// Looks a tokenizer up by name ("bytes", "gpt2"); vocab_dir holds encoder.json + vocab.bpe for gpt2.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& vocab_dir = "");

}  // namespace odyssey
