#include "odyssey/data/tiktoken_vocabulary.h"

#include <array>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace odyssey {

namespace {

// Document separators: what llm.c's data scripts put before every document (GPT-style
// <|endoftext|>; Llama 3's <|begin_of_text|>, its BOS).
struct Known {
  std::string_view name, separator;
};
constexpr std::array<Known, 3> kKnown = {{
    {"cl100k_base", "<|endoftext|>"},
    {"o200k_base", "<|endoftext|>"},
    {"llama3", "<|begin_of_text|>"},
}};

// Standard base64 with padding; false on any other character or a bad length.
bool decode_base64(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v;
    v.fill(-1);
    const std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) v[uint8_t(alphabet[i])] = int8_t(i);
    return v;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t quad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const bool padded = i + 4 == in.size() && k >= 4 - pad;
      const int8_t d = padded ? int8_t(0) : value[uint8_t(in[i + k])];
      if (d < 0) return false;
      quad = (quad << 6) | uint32_t(d);
    }
    out.push_back(char(quad >> 16));
    if (i + 4 < in.size() || pad < 2) out.push_back(char(quad >> 8));
    if (i + 4 < in.size() || pad < 1) out.push_back(char(quad));
  }
  return true;
}

}  // namespace

BpeVocabulary parse_tiktoken_json(std::string_view text, const std::string& source, const std::string& name,
                                  const std::string& separator) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", source, e.what());
  }
  ODY_CHECK(j.is_object(), "{}: expected a JSON object with pat_str, special_tokens and bpe_ranks", source);
  for (const char* key : {"pat_str", "bpe_ranks"})
    ODY_CHECK(j.contains(key) && j[key].is_string(), "{}: \"{}\" is missing or not a string", source, key);
  ODY_CHECK(j.contains("special_tokens") && j["special_tokens"].is_object(),
            "{}: \"special_tokens\" is missing or not an object", source);

  BpeVocabulary vocab;
  vocab.name = name;
  vocab.source = source;
  vocab.pattern = j["pat_str"].get<std::string>();
  vocab.separator = separator;
  for (const auto& [literal, id] : j["special_tokens"].items()) {
    ODY_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (int64_t(1) << 30),
              "{}: special token {} has id {}, not an integer in 0..2^30", source,
              nlohmann::json(literal).dump(), id.dump());
    vocab.specials.emplace_back(literal, int(id.get<int64_t>()));
  }

  // Tokens are checked here for syntax and rank order; BpeTokenizer checks uniqueness and coverage.
  const std::string ranks = j["bpe_ranks"].get<std::string>();
  std::string bytes;
  size_t line_number = 0;
  for (size_t pos = 0; pos < ranks.size();) {
    ++line_number;
    const size_t line_end = std::min(ranks.find('\n', pos), ranks.size());
    size_t field = 0;
    int64_t rank = 0;
    for (size_t at = pos; at < line_end; ++field) {
      size_t end = std::min(ranks.find(' ', at), line_end);
      const std::string_view word(ranks.data() + at, end - at);
      ODY_CHECK(!word.empty(), "{}: bpe_ranks line {} (byte {}): empty field (two spaces?)", source,
                line_number, at);
      if (field == 1) {
        auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), rank);
        ODY_CHECK(ec == std::errc() && p == word.data() + word.size() && rank >= 0,
                  "{}: bpe_ranks line {} (byte {}): first rank \"{}\" is not a non-negative integer", source,
                  line_number, at, word);
        ODY_CHECK(size_t(rank) == vocab.ranks.size(),
                  "{}: bpe_ranks line {} (byte {}): ranks resume at {}, expected {} (ranks must be dense)",
                  source, line_number, at, rank, vocab.ranks.size());
      } else if (field > 1) {
        ODY_CHECK(decode_base64(word, bytes), "{}: bpe_ranks line {} (byte {}): token \"{}\" is not base64",
                  source, line_number, at, word.substr(0, 40));
        ODY_CHECK(vocab.ranks.size() < (size_t(1) << 30), "{}: bpe_ranks: too many ranks", source);
        vocab.ranks.push_back(bytes);
      }
      at = end + (end < line_end ? 1 : 0);
      ODY_CHECK(end + 1 != line_end, "{}: bpe_ranks line {} (byte {}): trailing space", source, line_number,
                end);
    }
    ODY_CHECK(field >= 2, "{}: bpe_ranks line {} (byte {}): expected \"<prefix> <first rank> <tokens...>\"",
              source, line_number, pos);
    pos = line_end + 1;
  }
  ODY_CHECK(!vocab.ranks.empty(), "{}: bpe_ranks holds no tokens", source);
  return vocab;
}

bool is_tiktoken_tokenizer(const std::string& name) {
  for (const auto& k : kKnown)
    if (k.name == name) return true;
  return false;
}

std::unique_ptr<Tokenizer> make_tiktoken_tokenizer(const std::string& name, const std::string& vocab_dir) {
  const Known* known = nullptr;
  for (const auto& k : kKnown)
    if (k.name == name) known = &k;
  ODY_CHECK(known != nullptr, "unknown tiktoken-format tokenizer '{}'", name);
  const std::string path = (std::filesystem::path(vocab_dir) / (name + ".json")).string();
  std::error_code ec;
  ODY_CHECK(std::filesystem::is_regular_file(path, ec),
            "{}: no such file (bash scripts/fetch_tokenizer.sh {} fetches it)", path, name);
  const std::string text = read_text_file(path);
  return std::make_unique<BpeTokenizer>(parse_tiktoken_json(text, path, name, std::string(known->separator)));
}

}  // namespace odyssey
