#include "odyssey/data/gpt2_tokenizer.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/core/string_view_hash.h"

namespace odyssey {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::string_view kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// GPT-2 writes token bytes as printable characters: printable Latin-1 bytes stand for themselves, the
// other 68 bytes become U+0100.. in byte order. Returns code point -> byte (-1 when not in the alphabet).
std::array<int, 324> unicode_to_byte() {
  std::array<int, 324> inv;
  inv.fill(-1);
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    inv[printable ? b : 256 + shifted++] = b;
  }
  return inv;
}

// The bytes a token string of encoder.json / vocab.bpe stands for, or false when it has a character
// outside GPT-2's byte alphabet (or is not UTF-8).
bool unmap_token(std::string_view s, const std::array<int, 324>& inv, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    auto c = uint8_t(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if (c >= 0xC2 && c < 0xE0 && i + 1 < s.size() && (uint8_t(s[i + 1]) & 0xC0) == 0x80) {
      cp = (uint32_t(c & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // the alphabet ends at U+0143, so longer sequences cannot be in it
    }
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out.push_back(char(inv[cp]));
  }
  return !out.empty();
}

std::string read_vocab_file(const std::string& path) {
  std::error_code ec;
  ODY_CHECK(std::filesystem::is_regular_file(path, ec),
            "{}: no such file (scripts/fetch_gpt2_vocab.sh fetches it)", path);
  return read_text_file(path);
}

}  // namespace

BpeVocabulary parse_gpt2_vocabulary(std::string_view encoder_json, std::string_view vocab_bpe,
                                    const std::string& encoder_name, const std::string& vocab_name) {
  const auto inv = unicode_to_byte();
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(encoder_json);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", encoder_name, e.what());
  }
  ODY_CHECK(encoder.is_object() && !encoder.empty(),
            "{}: expected a JSON object mapping token strings to ids", encoder_name);
  const size_t n = encoder.size();
  std::vector<std::string> token_bytes(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int, StringViewHash, std::equal_to<>> id_of;  // bytes -> id, eot excluded
  int eot = -1;
  std::string bytes;
  for (const auto& [name, value] : encoder.items()) {
    ODY_CHECK(value.is_number_integer(), "{}: the id of token {} is not an integer", encoder_name,
              nlohmann::json(name).dump());
    const int64_t id = value.get<int64_t>();
    ODY_CHECK(id >= 0 && id < int64_t(n), "{}: id {} of token {} is outside 0..{} (ids must be dense)",
              encoder_name, id, nlohmann::json(name).dump(), n - 1);
    ODY_CHECK(!seen[size_t(id)], "{}: id {} is used twice", encoder_name, id);
    seen[size_t(id)] = true;
    if (name == kEndOfText) {
      eot = int(id);
      continue;
    }
    ODY_CHECK(unmap_token(name, inv, bytes), "{}: token {} has a character outside GPT-2's byte alphabet",
              encoder_name, nlohmann::json(name).dump());
    token_bytes[size_t(id)] = bytes;
    id_of.emplace(bytes, int(id));
  }
  ODY_CHECK(eot >= 0, "{}: no {} token", encoder_name, kEndOfText);
  ODY_CHECK(eot == int(n) - 1, "{}: {} has id {}; it must be the last id, {}", encoder_name, kEndOfText, eot,
            n - 1);
  token_bytes.pop_back();
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    ODY_CHECK(id_of.count(std::string_view(&byte, 1)) != 0, "{}: no token for the single byte 0x{:02x}",
              encoder_name, b);
  }

  // vocab.bpe lists the merges in rank order; the engine merges by the ids themselves, so the two
  // must agree: merge k (0-based) makes id 256 + k.
  size_t rank = 0;
  std::string left, right;
  for (size_t pos = 0, number = 1; pos < vocab_bpe.size(); ++number) {
    size_t end = std::min(vocab_bpe.find('\n', pos), vocab_bpe.size());
    std::string_view line = vocab_bpe.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    if (line.empty() || (number == 1 && line.starts_with("#version"))) continue;
    size_t space = line.find(' ');
    ODY_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string_view::npos,
              "{}:{}: expected two tokens separated by one space, got \"{}\"", vocab_name, number, line);
    std::string_view a = line.substr(0, space), b = line.substr(space + 1);
    ODY_CHECK(unmap_token(a, inv, left) && unmap_token(b, inv, right),
              "{}:{}: \"{}\" has a character outside GPT-2's byte alphabet", vocab_name, number, line);
    auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    ODY_CHECK(l != id_of.end() && r != id_of.end() && m != id_of.end(),
              "{}:{}: merge \"{}\" uses or makes a token that is not in {}", vocab_name, number, line,
              encoder_name);
    ODY_CHECK(m->second >= 256 + int(rank), "{}:{}: merge \"{}\" is repeated", vocab_name, number, line);
    ODY_CHECK(m->second == 256 + int(rank),
              "{}:{}: merge \"{}\" makes id {} in {}, but as merge {} it should make id {}", vocab_name,
              number, line, m->second, encoder_name, rank, 256 + rank);
    ++rank;
  }
  ODY_CHECK(rank > 0, "{}: no merges", vocab_name);

  BpeVocabulary vocab;
  vocab.name = "gpt2";
  vocab.source = encoder_name;
  vocab.ranks = std::move(token_bytes);
  vocab.pattern = std::string(kPattern);
  vocab.specials = {{std::string(kEndOfText), eot}};
  vocab.separator = std::string(kEndOfText);
  return vocab;
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path)
    : BpeTokenizer([&] {
        const std::string encoder = read_vocab_file(encoder_json_path);
        const std::string merges = read_vocab_file(vocab_bpe_path);
        return parse_gpt2_vocabulary(encoder, merges, encoder_json_path, vocab_bpe_path);
      }()) {}

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_dir) {
  ODY_CHECK(!vocab_dir.empty(),
            "gpt2 tokenizer: no vocabulary directory given (it holds encoder.json and vocab.bpe; "
            "scripts/fetch_gpt2_vocab.sh fetches them)");
  namespace fs = std::filesystem;
  return std::make_unique<Gpt2Tokenizer>((fs::path(vocab_dir) / "encoder.json").string(),
                                         (fs::path(vocab_dir) / "vocab.bpe").string());
}

}  // namespace odyssey
