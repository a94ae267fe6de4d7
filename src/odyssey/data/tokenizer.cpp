#include "odyssey/data/tokenizer.h"

#include <cstdlib>
#include <filesystem>

#include "odyssey/core/error.h"
#include "odyssey/data/gpt2_tokenizer.h"
#include "odyssey/data/tiktoken_vocabulary.h"

namespace odyssey {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int> encode(std::string_view text) const override {
    std::vector<int> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = int(static_cast<unsigned char>(text[i]));
    return ids;
  }

  std::string decode(const std::vector<int>& ids) const override {
    std::string text(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      ODY_CHECK(ids[i] >= 0 && ids[i] < 256, "bytes tokenizer: id {} at position {} is not a byte (0..255)",
                ids[i], i);
      text[i] = char(static_cast<unsigned char>(ids[i]));
    }
    return text;
  }

  int vocab_size() const override { return 256; }
  int eot_id() const override { return -1; }
  std::string name() const override { return "bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
  return std::make_unique<ByteTokenizer>();
}

std::string default_vocab_dir(const std::string& name) {
  const char* env = std::getenv("ODYSSEY_CACHE");
  const std::filesystem::path cache = env != nullptr && *env != '\0' ? env : "cache";
  return (cache / name).string();
}

bool is_tokenizer_name(const std::string& name) {
  return name == "bytes" || name == "gpt2" || is_tiktoken_tokenizer(name);
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& vocab_dir) {
  if (name == "bytes") return make_byte_tokenizer();
  const std::string dir = vocab_dir.empty() ? default_vocab_dir(name) : vocab_dir;
  if (name == "gpt2") return make_gpt2_tokenizer(dir);
  if (is_tiktoken_tokenizer(name)) return make_tiktoken_tokenizer(name, dir);
  fail("unknown tokenizer '{}' (expected {})", name, kTokenizerNames);
}

}  // namespace odyssey
