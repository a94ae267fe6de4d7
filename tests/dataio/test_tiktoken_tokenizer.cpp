// cl100k_base, o200k_base and llama3 (tiktoken's encoder format, the shared BPE engine) against ids
// that tiktoken and llama3-tokenizer-js produced (tests/data/tiktoken_cases.json, written by
// scripts/make_tiktoken_reference.js), plus round trips over arbitrary bytes and the parser's errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/data/bpe_tokenizer.h"
#include "odyssey/data/tiktoken_vocabulary.h"
#include "odyssey/data/tokenizer.h"

#include "data_test_util.h"

using namespace odyssey;
namespace fs = std::filesystem;

using odyssey::testing_data::cache_dir;
using odyssey::testing_data::concat;
using odyssey::testing_data::printable;

namespace {

const BpeTokenizer* load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[name];
  if (slot == nullptr && fs::is_regular_file(cache_dir() / name / (name + ".json")))
    slot = make_tiktoken_tokenizer(name, (cache_dir() / name).string());
  return dynamic_cast<const BpeTokenizer*>(slot.get());
}

#define REQUIRE_TOKENIZER(tok, name)                                                                     \
  const BpeTokenizer* tok = load(name);                                                                  \
  if (tok == nullptr)                                                                                    \
  GTEST_SKIP() << name << " not found in " << cache_dir() << " (run scripts/fetch_tokenizer.sh " << name \
               << ", or set ODYSSEY_CACHE)"

const nlohmann::json& reference() {
  static const auto ref =
      nlohmann::json::parse(read_text_file(std::string(ODYSSEY_TEST_DATA) + "/tiktoken_cases.json"));
  return ref;
}

class Tiktoken : public ::testing::TestWithParam<std::string> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Encodings, Tiktoken, ::testing::Values("cl100k_base", "o200k_base", "llama3"));

TEST_P(Tiktoken, SizesAndSeparator) {
  REQUIRE_TOKENIZER(tok, GetParam());
  // tiktoken's n_vocab (largest id + 1) and the separator prepare writes before every document.
  const std::map<std::string, std::pair<int, int>> expected = {
      {"cl100k_base", {100277, 100257}}, {"o200k_base", {200019, 199999}}, {"llama3", {128256, 128000}}};
  EXPECT_EQ(tok->vocab_size(), expected.at(GetParam()).first);
  EXPECT_EQ(tok->eot_id(), expected.at(GetParam()).second);
  EXPECT_EQ(tok->name(), GetParam());
}

// encode() equals tiktoken's encode_ordinary and encode_allow_special() its encode(text, "all") on
// every adversarial string (whitespace and digit runs, CJK, emoji, controls, special-token look-alikes).
TEST_P(Tiktoken, MatchesTiktokenOnAdversarialStrings) {
  REQUIRE_TOKENIZER(tok, GetParam());
  const auto& cases = reference()["tokenizers"][GetParam()]["cases"];
  ASSERT_GT(cases.size(), 400u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int>>();
    EXPECT_EQ(tok->encode(text), ids) << "text " << printable(text);
    EXPECT_EQ(tok->encode_allow_special(text),
              c.contains("special") ? c["special"].get<std::vector<int>>() : ids)
        << "text " << printable(text);
  }
}

TEST_P(Tiktoken, MatchesTiktokenOnBrownExcerpts) {
  REQUIRE_TOKENIZER(tok, GetParam());
  const auto& texts = reference()["brown_excerpts"];
  const auto& ids = reference()["tokenizers"][GetParam()]["brown_excerpts"];
  ASSERT_EQ(texts.size(), ids.size());
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok->encode(texts[i].get<std::string>()), ids[i]["ids"].get<std::vector<int>>())
        << "excerpt " << i;
}

// Every file of the Brown corpus: token count and hash of the ids as tiktoken computed them.
TEST_P(Tiktoken, MatchesTiktokenOnWholeBrownCorpus) {
  REQUIRE_TOKENIZER(tok, GetParam());
  const fs::path dir = cache_dir() / "brown" / "text";
  if (!fs::is_directory(dir))
    GTEST_SKIP() << "Brown corpus not found in " << dir << " (run scripts/fetch_brown.sh)";
  const auto& files = reference()["tokenizers"][GetParam()]["brown_files"];
  ASSERT_EQ(files.size(), 500u);
  std::vector<std::string> texts;
  for (const auto& f : files) texts.push_back(read_text_file((dir / f["file"].get<std::string>()).string()));
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  const auto ids = tok->encode_batch(docs);
  for (size_t i = 0; i < files.size(); ++i) {
    uint32_t hash = 0;
    for (int id : ids[i]) hash = hash * 1000003u + uint32_t(id);
    EXPECT_EQ(ids[i].size(), files[i]["tokens"].get<size_t>()) << files[i]["file"];
    EXPECT_EQ(hash, files[i]["hash"].get<uint32_t>()) << files[i]["file"];
    EXPECT_EQ(tok->decode(ids[i]), texts[i]) << files[i]["file"];
  }
}

// llama3-tokenizer-js (Hugging Face's merges, JavaScript's regex) gives tiktoken's ids except where
// JavaScript's \s differs from Unicode White_Space: it includes U+FEFF and leaves out U+0085. We
// follow tiktoken (Meta's reference); the reference file keeps llama3-tokenizer-js's ids where they
// differ, and every such case has one of the two characters.
TEST(TiktokenLlama3, MatchesLlama3TokenizerJsExceptJavaScriptWhitespace) {
  REQUIRE_TOKENIZER(tok, "llama3");
  const auto& t = reference()["tokenizers"]["llama3"];
  size_t differ = 0, total = 0;
  for (const auto* key : {"cases", "brown_excerpts"}) {
    for (const auto& c : t[key]) {
      ++total;
      if (!c.contains("js")) continue;  // llama3-tokenizer-js agreed with tiktoken, checked above
      ++differ;
      const std::string text = c["text"];
      EXPECT_TRUE(text.find("\xef\xbb\xbf") != std::string::npos ||
                  text.find("\xc2\x85") != std::string::npos)
          << "llama3-tokenizer-js differs on " << printable(text);
    }
  }
  EXPECT_EQ(differ, t["js_differences"].get<size_t>());
  EXPECT_LT(differ * 50, total);
}

TEST_P(Tiktoken, SpecialTokensOnlyWhenAllowed) {
  REQUIRE_TOKENIZER(tok, GetParam());
  const std::string sep = tok->decode_one(tok->eot_id());
  EXPECT_EQ(sep, GetParam() == "llama3" ? "<|begin_of_text|>" : "<|endoftext|>");
  const std::string text = "a" + sep + "b";
  EXPECT_EQ(tok->encode_allow_special(text), concat({tok->encode("a"), {tok->eot_id()}, tok->encode("b")}));
  for (int id : tok->encode(text)) EXPECT_NE(id, tok->eot_id());
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

// Arbitrary bytes, invalid UTF-8 included, come back unchanged; ids are in range.
TEST_P(Tiktoken, RoundTripArbitraryBytes) {
  REQUIRE_TOKENIZER(tok, GetParam());
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a",
                                          "Z",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\r\n",
                                          "\t",
                                          "'",
                                          "'ll",
                                          "'S",
                                          "7",
                                          "123",
                                          "\xc3\xa9",
                                          "\xe4\xb8\xad",
                                          "\xf0\x9f\x98\x80",
                                          "\xcc\x81",
                                          "\xe3\x80\x80",
                                          "\xc2\x85",
                                          "\xef\xbb\xbf",
                                          "!",
                                          "/",
                                          "\xff",
                                          "\x80",
                                          "\xe2\x82",
                                          "\x00",
                                          "<|endoftext|>"};
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const size_t n = rng() % 300;
    for (size_t k = 0; k < n; ++k) {
      if (i % 2 == 0)
        s.push_back(char(rng() & 0xff));
      else
        s += atoms[rng() % atoms.size()];
    }
    texts.push_back(s);
  }
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  const auto batch = tok->encode_batch(docs);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok->decode(batch[i]), texts[i]) << "text " << printable(texts[i]);
    EXPECT_EQ(tok->encode(texts[i]), batch[i]) << "text " << printable(texts[i]);
    EXPECT_EQ(tok->decode(tok->encode_allow_special(texts[i])), texts[i]) << "text " << printable(texts[i]);
    for (int id : batch[i]) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
  }
  // Each run of invalid bytes is a piece of its own; the text around it is split as at an end.
  EXPECT_EQ(tok->encode("caf\xe9 au lait"),
            concat({tok->encode("caf"), tok->encode("\xe9"), tok->encode(" au lait")}));
  EXPECT_EQ(tok->encode("12345\xff\xfe"), concat({tok->encode("12345"), tok->encode("\xff\xfe")}));
  for (std::string text :
       {std::string(1 << 20, '7'), std::string(1 << 20, ' ') + "x", std::string(1 << 20, '\xff')})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(TiktokenO200k, DecodeRejectsIdsBetweenRanksAndSpecials) {
  REQUIRE_TOKENIZER(tok, "o200k_base");
  EXPECT_THROW(tok->decode({199998}), Error);  // no rank and no special token has this id
  EXPECT_THROW(tok->decode({200019}), Error);
  EXPECT_THROW(tok->decode({-1}), Error);
  EXPECT_EQ(tok->decode({200018}), "<|endofprompt|>");
}

// ---- The format, from strings: a small synthetic vocabulary, so these run without fetched files. ----

namespace {

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[v & 63] : '=';
  }
  return out;
}

// All 256 bytes, then "ab", "abc", "aa", "aaaa", " t", " the", "he" (ranks 256..262).
std::vector<std::string> small_ranks() {
  std::vector<std::string> r;
  for (int b = 0; b < 256; ++b) r.push_back(std::string(1, char(b)));
  for (const char* t : {"ab", "abc", "aa", "aaaa", " t", " the", "he"}) r.push_back(t);
  return r;
}

std::string small_json(
    const std::vector<std::string>& ranks, const std::string& extra_line = "",
    const std::string& pattern = "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    nlohmann::json specials = {{"<|end|>", 300}}) {
  std::string line = "! 0";
  for (const auto& t : ranks) {  // two appends: GCC 12 warns falsely (-Wrestrict) on " " + std::string
    line += ' ';
    line += base64(t);
  }
  return nlohmann::json{{"pat_str", pattern}, {"special_tokens", specials}, {"bpe_ranks", line + extra_line}}
      .dump();
}

std::string parse_error(const std::string& text, const std::string& separator = "<|end|>") {
  try {
    BpeTokenizer tok(parse_tiktoken_json(text, "vocab.json", "small", separator));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TiktokenFormat, MergesByRankOfTheConcatenation) {
  BpeTokenizer tok(parse_tiktoken_json(small_json(small_ranks()), "vocab.json", "small", "<|end|>"));
  EXPECT_EQ(tok.vocab_size(), 301);
  EXPECT_EQ(tok.eot_id(), 300);
  EXPECT_EQ(tok.encode("abc"), std::vector<int>{257});         // a whole piece that is a token
  EXPECT_EQ(tok.encode("aab"), (std::vector<int>{'a', 256}));  // "ab" (256) merges before "aa" (258)
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int>{258, 'a'}));  // leftmost among equal ranks
  EXPECT_EQ(tok.encode("aaaaa"), (std::vector<int>{259, 'a'}));
  // The pattern splits " " from "tha" (no " ?\p{L}+" alternative), and "th" is no token.
  EXPECT_EQ(tok.encode(" tha"), (std::vector<int>{' ', 't', 'h', 'a'}));
  EXPECT_EQ(tok.encode_allow_special("x<|end|>y"), (std::vector<int>{'x', 300, 'y'}));
  EXPECT_THROW(tok.decode({299}), Error);  // a gap between the ranks and the special token
}

TEST(TiktokenFormat, BadFilesNameTheFileAndOffset) {
  auto expect = [](const std::string& text, const std::string& what,
                   const std::string& separator = "<|end|>") {
    const std::string err = parse_error(text, separator);
    EXPECT_NE(err.find("vocab.json"), std::string::npos) << "no file name in: " << err;
    EXPECT_NE(err.find(what), std::string::npos) << "expected \"" << what << "\" in: " << err;
  };
  const auto ranks = small_ranks();
  EXPECT_EQ(parse_error(small_json(ranks)), "");
  expect("{\"pat_str\": ", "malformed JSON");
  expect("[]", "expected a JSON object");
  expect(R"({"special_tokens": {}, "bpe_ranks": "! 0 AA=="})", "\"pat_str\" is missing");
  expect(R"({"pat_str": "x", "bpe_ranks": "! 0 AA=="})", "\"special_tokens\" is missing");
  expect(R"({"pat_str": "x", "special_tokens": {"<|e|>": "7"}, "bpe_ranks": "! 0 AA=="})", "not an integer");
  // Token 3 of line 1 (after "! 0 ") starts at byte 4 + 3 * 5 = 19.
  std::string corrupt = small_json(ranks);
  corrupt.replace(corrupt.find(base64("\x03")), 4, "A*==");
  expect(corrupt, "line 1 (byte 19): token \"A*==\" is not base64");
  // Line 1 is "! 0" and 263 tokens: 256 + 5 of 4 base64 characters and 2 of 8, each after a space:
  // 3 + 261 * 5 + 2 * 9 = 1326 bytes, so line 2 starts at byte 1327 and its first rank at 1329.
  expect(small_json(ranks, "\n! 300 YWJj"), "line 2 (byte 1329): ranks resume at 300, expected 263");
  expect(small_json(ranks, "\n! x YWJj"),
         "line 2 (byte 1329): first rank \"x\" is not a non-negative integer");
  expect(small_json(ranks, "\n!"), "line 2 (byte 1327): expected");
  expect(small_json(ranks, " "), "trailing space");
  auto dup = ranks;
  dup.push_back("ab");
  expect(small_json(dup), "rank 263 repeats the bytes of rank 256");
  auto no_q = ranks;
  no_q['q'] = "qq";
  expect(small_json(no_q), "no token for the single byte 0x71");
  expect(small_json(ranks, "", "(unclosed"), "cannot compile the pre-tokenisation pattern");
  expect(small_json(ranks, "", "[^\\S]"), "\\S inside a character class");
  expect(small_json(ranks, "", "x", {{"<|end|>", 5}}), "which is a rank");
  expect(small_json(ranks, "", "x", {{"<|end|>", 300}, {"<|e2|>", 300}}), "reuses id 300");
  expect(small_json(ranks), "no special token <|sep|>", "<|sep|>");
}

TEST(TiktokenFormat, PatternSpellsOutWhiteSpace) {
  const std::string ws = pcre2_pattern_from_tiktoken("\\s");
  EXPECT_EQ(ws.front(), '[');
  EXPECT_NE(ws.find("\\x{85}"), std::string::npos);
  EXPECT_EQ(ws.find("180E"), std::string::npos);
  EXPECT_EQ(pcre2_pattern_from_tiktoken("[^\\s\\p{L}]").substr(0, 3), "[^\\");
  EXPECT_EQ(pcre2_pattern_from_tiktoken("a\\\\s"), "a\\\\s");  // an escaped backslash, then "s"
  EXPECT_EQ(pcre2_pattern_from_tiktoken("[]\\s]").find("[]"), 0u);
  EXPECT_THROW(pcre2_pattern_from_tiktoken("[\\S]"), Error);
}

TEST(TiktokenFormat, MissingFilesNameTheFetchScript) {
  const fs::path empty = fs::path(::testing::TempDir()) / "tiktoken_empty";
  fs::create_directories(empty);
  for (const std::string name : {"cl100k_base", "o200k_base", "llama3"}) {
    try {
      make_tokenizer(name, empty.string());
      ADD_FAILURE() << "expected an error for " << name;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find((empty / (name + ".json")).string()), std::string::npos) << msg;
      EXPECT_NE(msg.find("scripts/fetch_tokenizer.sh " + name), std::string::npos) << msg;
    }
  }
  // Without --vocab-dir the files are looked for in $ODYSSEY_CACHE/<name>.
  const char* old = std::getenv("ODYSSEY_CACHE");
  const std::string saved = old != nullptr ? old : "";
  setenv("ODYSSEY_CACHE", empty.string().c_str(), 1);
  EXPECT_EQ(default_vocab_dir("llama3"), (empty / "llama3").string());
  try {
    make_tokenizer("gpt2");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((empty / "gpt2" / "encoder.json").string()), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("fetch_gpt2_vocab.sh"), std::string::npos) << e.what();
  }
  if (old != nullptr)
    setenv("ODYSSEY_CACHE", saved.c_str(), 1);
  else
    unsetenv("ODYSSEY_CACHE");
  try {
    make_tokenizer("cl200k");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama3"), std::string::npos) << e.what();
  }
}
