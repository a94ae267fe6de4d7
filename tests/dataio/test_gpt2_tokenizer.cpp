#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/data/gpt2_tokenizer.h"
#include "odyssey/data/tokenizer.h"

#include "data_test_util.h"

using namespace odyssey;
namespace fs = std::filesystem;

using odyssey::testing_data::cache_dir;
using odyssey::testing_data::concat;
using odyssey::testing_data::printable;

namespace {

fs::path vocab_dir() {
  return cache_dir() / "gpt2";
}

bool have_vocab() {
  return fs::is_regular_file(vocab_dir() / "encoder.json") && fs::is_regular_file(vocab_dir() / "vocab.bpe");
}

#define REQUIRE_VOCAB()                                           \
  if (!have_vocab())                                              \
  GTEST_SKIP() << "GPT-2 vocabulary not found in " << vocab_dir() \
               << " (run scripts/fetch_gpt2_vocab.sh, or set ODYSSEY_CACHE)"

const Gpt2Tokenizer& gpt2() {
  static auto tok = std::make_unique<Gpt2Tokenizer>((vocab_dir() / "encoder.json").string(),
                                                    (vocab_dir() / "vocab.bpe").string());
  return *tok;
}

nlohmann::json reference_cases() {
  return nlohmann::json::parse(read_text_file(std::string(ODYSSEY_TEST_DATA) + "/gpt2_tokenizer_cases.json"));
}

}  // namespace

// Ids equal tiktoken's gpt2 encode_ordinary for every committed case (scripts/make_tokenizer_reference.js).
TEST(Gpt2Tokenizer, MatchesTiktokenReference) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eot_id(), 50256);
  EXPECT_EQ(tok.name(), "gpt2");
  auto ref = reference_cases();
  ASSERT_GE(ref["cases"].size(), 50u);
  std::vector<std::string> texts;
  for (const auto& c : ref["cases"]) {
    std::string text = c["text"];
    std::vector<int> ids = c["ids"];
    EXPECT_EQ(tok.encode(text), ids) << "text " << printable(text);
    texts.push_back(text);
  }
  // The parallel path gives the same ids, whatever order the threads take the documents in.
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  auto batch = tok.encode_batch(docs);
  ASSERT_EQ(batch.size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<int> ids = ref["cases"][i]["ids"];
    EXPECT_EQ(batch[i], ids) << "batch, text " << printable(texts[i]);
  }
}

TEST(Gpt2Tokenizer, SpecialTokenOnlyWhenAllowed) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  const auto ref = reference_cases();
  for (const auto& c : ref["allow_special"]) {
    std::string text = c["text"];
    std::vector<int> ids = c["ids"];
    EXPECT_EQ(tok.encode_allow_special(text), ids) << "text " << printable(text);
  }
  // Plain encode never produces the end-of-text id, even from the literal string.
  auto ids = tok.encode("<|endoftext|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eot_id()), 0);
  EXPECT_EQ(tok.decode(ids), "<|endoftext|>");
  EXPECT_EQ(tok.decode_one(tok.eot_id()), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, RoundTripReferenceCases) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  const auto ref = reference_cases();
  for (const auto& c : ref["cases"]) {
    std::string text = c["text"];
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << "text " << printable(text);
  }
}

// Documented handling of invalid UTF-8: each maximal run of invalid bytes is a piece of its own and
// the valid text around it is encoded as if the run were not there; decode restores every byte.
TEST(Gpt2Tokenizer, InvalidUtf8IsItsOwnPiece) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  // Latin-1 "é" inside ASCII text: one byte token between the pieces "caf" and " au lait".
  const std::string latin1 = "caf\xe9 au lait";
  auto ids = tok.encode(latin1);
  EXPECT_EQ(ids, concat({tok.encode("caf"), tok.encode("\xe9"), tok.encode(" au lait")}));
  ASSERT_EQ(tok.encode("\xe9").size(), 1u);
  EXPECT_EQ(tok.decode_one(tok.encode("\xe9")[0]), "\xe9");
  EXPECT_EQ(tok.decode(ids), latin1);
  // A run of invalid bytes stays together; whitespace before it behaves as at the end of the text.
  EXPECT_EQ(tok.encode("ab  \xff\xfe\x80 cd"),
            concat({tok.encode("ab  "), tok.encode("\xff\xfe\x80"), tok.encode(" cd")}));
  // Truncated, overlong, surrogate and beyond-U+10FFFF sequences, alone and amid text.
  for (std::string bad : {"\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
                          "\x80", "\xc3", "\xf0\x9f\x98"}) {
    for (const std::string& text : {bad, "x" + bad, bad + "y", "hello " + bad + " world\n", bad + bad}) {
      auto enc = tok.encode(text);
      EXPECT_EQ(tok.decode(enc), text) << "text " << printable(text);
    }
  }
  // A valid 4-byte character right after a truncated one is still recognised.
  EXPECT_EQ(tok.encode("\xf0\x9f\x98\xf0\x9f\x98\x80"),
            concat({tok.encode("\xf0\x9f\x98"), tok.encode("\xf0\x9f\x98\x80")}));
}

TEST(Gpt2Tokenizer, RoundTripRandomBytes) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  std::mt19937 rng(20240520);
  // Pure random bytes, and text-like mixtures of ASCII, multi-byte characters and stray bytes.
  const std::vector<std::string> atoms = {"a",
                                          "Z",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\t",
                                          "'",
                                          "'ll",
                                          "7",
                                          "\xc3\xa9",
                                          "\xe4\xb8\xad",
                                          "\xf0\x9f\x98\x80",
                                          "\xcc\x81",
                                          "\xe3\x80\x80",
                                          "\xc2\x85",
                                          "!",
                                          "\xff",
                                          "\x80",
                                          "\xe2\x82",
                                          "\x00"};
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    std::string s;
    size_t n = rng() % 300;
    if (i % 2 == 0) {
      for (size_t k = 0; k < n; ++k) s.push_back(char(rng() & 0xff));
    } else {
      for (size_t k = 0; k < n; ++k) s += atoms[rng() % atoms.size()];
    }
    texts.push_back(s);
  }
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  auto batch = tok.encode_batch(docs);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok.decode(batch[i]), texts[i]) << "text " << printable(texts[i]);
    EXPECT_EQ(tok.encode(texts[i]), batch[i]) << "text " << printable(texts[i]);
    for (int id : batch[i]) ASSERT_TRUE(id >= 0 && id < tok.eot_id());
  }
}

TEST(Gpt2Tokenizer, LongInputs) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  // One piece of 1 MB (letters) and one of 1 MB (spaces), and a 1 MB invalid run: no quadratic blow-up,
  // no regex stack exhaustion.
  for (std::string text :
       {std::string(1 << 20, 'q'), std::string(1 << 20, ' ') + "x", std::string(1 << 20, '\xff')}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

// More distinct pieces than the per-thread cache keeps, so it fills and starts over mid-text; each
// " word" is a piece of its own, so the text's ids are the words' ids one after the other.
TEST(Gpt2Tokenizer, CacheEviction) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  std::mt19937 rng(7);
  std::string text;
  std::vector<int> expected;
  for (int w = 0; w < 200000; ++w) {
    std::string word = " ";
    for (size_t n = 3 + rng() % 8; n > 0; --n) word.push_back(char('a' + rng() % 26));
    text += word;
    if (w % 3 == 0) text += word;  // some repeats, served from the cache
    auto ids = tok.encode(word);
    expected.insert(expected.end(), ids.begin(), ids.end());
    if (w % 3 == 0) expected.insert(expected.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(tok.encode(text), expected);
}

TEST(Gpt2Tokenizer, MadeByName) {
  REQUIRE_VOCAB();
  auto tok = make_tokenizer("gpt2", vocab_dir().string());
  EXPECT_EQ(tok->name(), "gpt2");
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int>{15496, 995}));
  EXPECT_EQ(tok->decode_one(995), " world");
}

TEST(Gpt2Tokenizer, DecodeRejectsBadIds) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  EXPECT_THROW(tok.decode({15496, 50257}), Error);
  EXPECT_THROW(tok.decode({-1}), Error);
  EXPECT_EQ(tok.decode({}), "");
}

// The whole Brown corpus survives encode -> decode byte for byte.
TEST(Gpt2Tokenizer, RoundTripBrownCorpus) {
  REQUIRE_VOCAB();
  const fs::path dir = cache_dir() / "brown" / "text";
  std::vector<std::string> texts;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".txt") texts.push_back(read_text_file(e.path().string()));
    }
  }
  if (texts.empty()) GTEST_SKIP() << "Brown corpus not found in " << dir << " (run scripts/fetch_brown.sh)";
  const auto& tok = gpt2();
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  auto ids = tok.encode_batch(docs);
  size_t bytes = 0, tokens = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    ASSERT_EQ(tok.decode(ids[i]), texts[i]) << "document " << i;
    bytes += texts[i].size();
    tokens += ids[i].size();
  }
  EXPECT_GT(bytes, 1000000u);
  std::cout << "brown: " << docs.size() << " files, " << bytes << " bytes, " << tokens << " tokens, "
            << double(bytes) / double(tokens) << " bytes/token\n";
}

// ---- Vocabulary files: a small synthetic vocabulary, so these run without the fetched one. ----

namespace {

// GPT-2's byte alphabet: printable Latin-1 stands for itself, the other bytes are U+0100.. in order.
std::string byte_char(int b) {
  static const std::vector<int> cp = [] {
    std::vector<int> m(256);
    int shifted = 0;
    for (int x = 0; x < 256; ++x) {
      bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
      m[size_t(x)] = printable ? x : 256 + shifted++;
    }
    return m;
  }();
  int c = cp[size_t(b)];
  std::string s;
  if (c < 0x80) {
    s.push_back(char(c));
  } else {
    s.push_back(char(0xC0 | (c >> 6)));
    s.push_back(char(0x80 | (c & 0x3F)));
  }
  return s;
}

std::string mapped(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) s += byte_char(b);
  return s;
}

class Gpt2VocabFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("gpt2_vocab_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (int b = 0; b < 256; ++b) encoder_[byte_char(b)] = b;
    // Merges in rank order; each product gets the next id.
    merges_ = {{"a", "a"}, {"a", "b"}, {"ab", "c"}, {" ", "t"}, {" t", "he"}, {"h", "e"}, {"aa", "aa"}};
    int id = 256;
    for (auto& [l, r] : merges_) encoder_[mapped(l + r)] = id++;
    encoder_["<|endoftext|>"] = id;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string encoder_json() { return write("encoder.json", encoder_.dump()); }
  std::string vocab_bpe() {
    std::string text = "#version: 0.2\n";
    for (auto& [l, r] : merges_) text += mapped(l) + " " + mapped(r) + "\n";
    return write("vocab.bpe", text);
  }
  int id(const std::string& bytes) { return encoder_[mapped(bytes)]; }

  // The message of the Error that loading throws ("" when it loads).
  std::string load_error(const std::string& encoder, const std::string& vocab) {
    try {
      Gpt2Tokenizer tok(encoder, vocab);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  nlohmann::json encoder_;
  std::vector<std::pair<std::string, std::string>> merges_;
};

}  // namespace

TEST_F(Gpt2VocabFiles, MergesByRank) {
  Gpt2Tokenizer tok(encoder_json(), vocab_bpe());
  EXPECT_EQ(tok.vocab_size(), 256 + int(merges_.size()) + 1);
  EXPECT_EQ(tok.eot_id(), 256 + int(merges_.size()));
  EXPECT_EQ(tok.encode("abc"), std::vector<int>{id("abc")});
  // "a a" outranks "a b": aab -> aa b, and there is no "aa b" merge.
  EXPECT_EQ(tok.encode("aab"), (std::vector<int>{id("aa"), 'b'}));
  // Equal ranks merge leftmost first: aaa -> aa a; aaaa -> aa aa -> aaaa.
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int>{id("aa"), 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), std::vector<int>{id("aaaa")});
  EXPECT_EQ(tok.encode("aaaaa"), (std::vector<int>{id("aaaa"), 'a'}));
  // " the": " t" (rank 3), then "h e" (rank 5) makes the pair " t he" (rank 4) possible.
  EXPECT_EQ(tok.encode(" the"), std::vector<int>{id(" the")});
  EXPECT_EQ(tok.encode(" tha"), (std::vector<int>{id(" t"), 'h', 'a'}));
  EXPECT_EQ(tok.decode(tok.encode("aaaaa the abc")), "aaaaa the abc");
}

TEST_F(Gpt2VocabFiles, MissingFilesNameThePath) {
  std::string vocab = vocab_bpe();
  std::string missing = (dir_ / "nope" / "encoder.json").string();
  EXPECT_NE(load_error(missing, vocab).find(missing), std::string::npos) << load_error(missing, vocab);
  std::string encoder = encoder_json();
  std::string missing_bpe = (dir_ / "vocab_missing.bpe").string();
  EXPECT_NE(load_error(encoder, missing_bpe).find(missing_bpe), std::string::npos);
  // make_gpt2_tokenizer on a directory without the files.
  try {
    make_gpt2_tokenizer((dir_ / "empty").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encoder.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fetch_gpt2_vocab.sh"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_gpt2_tokenizer(""), Error);
}

TEST_F(Gpt2VocabFiles, MalformedEncoderJson) {
  std::string vocab = vocab_bpe();
  auto expect = [&](const std::string& content, const std::string& what) {
    std::string path = write("encoder.json", content);
    std::string err = load_error(path, vocab);
    EXPECT_NE(err.find(path), std::string::npos) << "no path in: " << err;
    EXPECT_NE(err.find(what), std::string::npos) << "expected \"" << what << "\" in: " << err;
  };
  expect("{\"a\": 0, ", "malformed JSON");
  expect("", "malformed JSON");
  expect("[1, 2]", "expected a JSON object");
  auto e = encoder_;
  e[mapped("aa")] = "x";
  expect(e.dump(), "not an integer");
  e = encoder_;
  e[mapped("aa")] = 100000;
  expect(e.dump(), "outside");
  e = encoder_;
  e[mapped("aa")] = 0;  // byte 0 has id 0 already
  expect(e.dump(), "used twice");
  e = encoder_;
  e.erase("<|endoftext|>");
  expect(e.dump(), "<|endoftext|>");
  e = encoder_;
  e["\xe4\xb8\xad"] = e["<|endoftext|>"].get<int>() + 1;
  expect(e.dump(), "outside GPT-2's byte alphabet");
  e = encoder_;
  int last = e[mapped("aa")];
  e.erase(byte_char('q'));
  e[mapped("aa")] = int('q');
  e[byte_char('q') + byte_char('q')] = last;  // keep ids dense
  expect(e.dump(), "0x71");
}

TEST_F(Gpt2VocabFiles, MalformedVocabBpe) {
  std::string encoder = encoder_json();
  auto expect = [&](const std::string& content, const std::string& what) {
    std::string path = write("vocab.bpe", content);
    std::string err = load_error(encoder, path);
    EXPECT_NE(err.find(path), std::string::npos) << "no path in: " << err;
    EXPECT_NE(err.find(what), std::string::npos) << "expected \"" << what << "\" in: " << err;
  };
  expect("#version: 0.2\n", "no merges");
  expect("", "no merges");
  expect("#version: 0.2\na a\nab\n", ":3: expected two tokens");
  expect("#version: 0.2\na a\na  b\n", ":3: expected two tokens");
  expect("#version: 0.2\na a\nx y\n", ":3: merge \"x y\" uses or makes a token that is not in");
  expect("#version: 0.2\na a\na a\n", ":3: merge \"a a\" is repeated");
  expect("#version: 0.2\na \xe4\xb8\xad\n", ":2:");
  // CRLF line ends are accepted.
  std::string crlf = "#version: 0.2\r\n";
  for (auto& [l, r] : merges_) crlf += mapped(l) + " " + mapped(r) + "\r\n";
  EXPECT_EQ(load_error(encoder, write("vocab.bpe", crlf)), "");
}
