#include "data_test_util.h"
#include "odyssey/data/prepare.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/data/dataset.h"
#include "odyssey/data/token_shard.h"
#include "odyssey/data/tokenizer.h"

namespace fs = std::filesystem;
using odyssey::Error;
using odyssey::prepare_shards;
using odyssey::PrepareOptions;

namespace {

using odyssey::testing_data::expect_error;
using odyssey::testing_data::TempDir;

// The text held by a list of shards, decoded with the byte tokenizer.
std::string decode_shards(const std::vector<std::string>& files) {
  std::string text;
  for (const auto& f : files) {
    odyssey::TokenShard shard(f);
    for (size_t i = 0; i < shard.size(); ++i) text.push_back(char(shard[i]));
  }
  return text;
}

std::vector<std::string> shard_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Five documents doc0..doc4 (sorted order = numeric order).
std::vector<std::string> make_docs(const TempDir& dir, std::vector<std::string>* texts) {
  std::vector<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    texts->push_back(fmt::format("Document {} says hello.\nSecond line of {}: {}\n", i, i,
                                 std::string(size_t(i) * 3, 'x')));
    paths.push_back(dir.file(fmt::format("doc{}.txt", i)));
    odyssey::write_text_atomic(paths.back(), texts->back());
  }
  return paths;
}

}  // namespace

TEST(Tokenizer, Bytes) {
  auto tok = odyssey::make_tokenizer("bytes");
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->eot_id(), -1);
  const std::string text = "h\xC3\xA9llo\n\x01\xFF";
  auto ids = tok->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(ids.back(), 255);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->decode_one('A'), "A");
  expect_error([&] { tok->decode({65, 256}); }, {"256", "position 1"});
}

TEST(Tokenizer, ByName) {
  expect_error([] { odyssey::make_tokenizer("gpt3"); }, {"'gpt3'"});
  // The gpt2 tokenizer needs its vocabulary files; a missing directory is named.
  expect_error([] { odyssey::make_tokenizer("gpt2", "/nowhere"); }, {"/nowhere"});
}

TEST(Prepare, SplitAndContents) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  PrepareOptions opt;
  opt.inputs = {paths[3], paths[0], paths[4], paths[1], paths[2]};  // order must not matter
  opt.output_dir = dir.file("out/nested");
  opt.val_fraction = 0.2;  // k = 5: the 5th document in sorted order goes to val
  opt.progress = false;
  auto s = prepare_shards(opt);
  EXPECT_EQ(s.documents, 5u);
  EXPECT_EQ(s.train_documents, 4u);
  EXPECT_EQ(s.val_documents, 1u);
  uint64_t bytes = 0;
  for (auto& t : texts) bytes += t.size();
  EXPECT_EQ(s.bytes, bytes);
  EXPECT_EQ(s.train_files, std::vector<std::string>{opt.output_dir + "/train_000000.bin"});
  EXPECT_EQ(s.val_files, std::vector<std::string>{opt.output_dir + "/val_000000.bin"});
  // Documents of a split are separated by one "\n" (bytes has no end-of-text token).
  const std::string train = texts[0] + "\n" + texts[1] + "\n" + texts[2] + "\n" + texts[3];
  EXPECT_EQ(decode_shards(s.train_files), train);
  EXPECT_EQ(decode_shards(s.val_files), texts[4]);
  EXPECT_EQ(s.train_tokens, train.size());
  EXPECT_EQ(s.val_tokens, texts[4].size());
  EXPECT_EQ(shard_files(opt.output_dir), (std::vector<std::string>{"train_000000.bin", "val_000000.bin"}));

  // Deterministic: the same inputs in another order give byte-identical shards.
  PrepareOptions again = opt;
  again.inputs = paths;
  again.output_dir = dir.file("out2");
  auto s2 = prepare_shards(again);
  EXPECT_EQ(odyssey::read_binary_file(s2.train_files[0]), odyssey::read_binary_file(s.train_files[0]));
  EXPECT_EQ(odyssey::read_binary_file(s2.val_files[0]), odyssey::read_binary_file(s.val_files[0]));

  // The shards load as a dataset.
  odyssey::TokenDataset data(opt.output_dir + "/train_*.bin", 8, 256, false, 0);
  std::vector<int> in(8), tg(8);
  data.get_row(1, in.data(), tg.data());
  EXPECT_EQ(std::string(in.begin(), in.end()), train.substr(8, 8));
}

TEST(Prepare, ShardSplittingAndStaleShards) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  PrepareOptions opt;
  opt.inputs = paths;
  opt.output_dir = dir.file("out");
  opt.val_fraction = 0.5;  // k = 2: doc1 and doc3 go to val
  opt.shard_tokens = 7;
  opt.progress = false;
  auto s = prepare_shards(opt);
  EXPECT_EQ(s.train_documents, 3u);
  EXPECT_EQ(s.val_documents, 2u);
  const std::string train = texts[0] + "\n" + texts[2] + "\n" + texts[4];
  EXPECT_EQ(decode_shards(s.train_files), train);
  EXPECT_EQ(decode_shards(s.val_files), texts[1] + "\n" + texts[3]);
  ASSERT_EQ(s.train_files.size(), (train.size() + 6) / 7);
  for (size_t i = 0; i + 1 < s.train_files.size(); ++i) {
    EXPECT_EQ(odyssey::TokenShard(s.train_files[i]).size(), 7u);
    EXPECT_EQ(s.train_files[i], opt.output_dir + fmt::format("/train_{:06d}.bin", i));
  }

  // A second run with bigger shards replaces the first run's shards entirely.
  opt.shard_tokens = 1'000'000;
  auto s2 = prepare_shards(opt);
  EXPECT_EQ(shard_files(opt.output_dir), (std::vector<std::string>{"train_000000.bin", "val_000000.bin"}));
  EXPECT_EQ(decode_shards(s2.train_files), train);
}

TEST(Prepare, ValFractionEdges) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  PrepareOptions opt;
  opt.progress = false;

  // Two documents and a small fraction: still one val document (the last).
  opt.inputs = {paths[0], paths[1]};
  opt.output_dir = dir.file("two");
  opt.val_fraction = 0.05;
  auto s = prepare_shards(opt);
  EXPECT_EQ(s.train_documents, 1u);
  EXPECT_EQ(s.val_documents, 1u);
  EXPECT_EQ(decode_shards(s.val_files), texts[1]);

  // One document: all train. Fraction 0: no val shards at all.
  opt.inputs = {paths[2]};
  opt.output_dir = dir.file("one");
  s = prepare_shards(opt);
  EXPECT_EQ(s.val_documents, 0u);
  EXPECT_TRUE(s.val_files.empty());
  opt.inputs = paths;
  opt.output_dir = dir.file("zero");
  opt.val_fraction = 0;
  s = prepare_shards(opt);
  EXPECT_EQ(s.train_documents, 5u);
  EXPECT_TRUE(s.val_files.empty());
  EXPECT_EQ(shard_files(opt.output_dir), std::vector<std::string>{"train_000000.bin"});

  opt.val_fraction = 0.7;
  expect_error([&] { prepare_shards(opt); }, {"val_fraction", "0.7"});
}

TEST(Prepare, EmptyFilesAreSkippedWithAWarning) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  const std::string empty = dir.file("doc2b_empty.txt");
  odyssey::write_text_atomic(empty, "");
  PrepareOptions opt;
  opt.inputs = paths;
  opt.inputs.push_back(empty);
  opt.output_dir = dir.file("out");
  opt.val_fraction = 0.2;
  opt.progress = false;
  testing::internal::CaptureStderr();
  auto s = prepare_shards(opt);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("skipping empty input file " + empty), std::string::npos) << err;
  EXPECT_EQ(s.documents, 5u);  // the empty file is not a document and does not shift the split
  EXPECT_EQ(decode_shards(s.val_files), texts[4]);

  opt.inputs = {empty};
  expect_error([&] { prepare_shards(opt); }, {"empty"});
}

TEST(Prepare, MissingInputAndBadOptions) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  PrepareOptions opt;
  opt.inputs = paths;
  opt.inputs.push_back(dir.file("missing.txt"));
  opt.output_dir = dir.file("out");
  opt.progress = false;
  expect_error([&] { prepare_shards(opt); }, {dir.file("missing.txt"), "not found"});
  EXPECT_FALSE(fs::exists(opt.output_dir));  // nothing written

  opt.inputs = paths;
  opt.tokenizer = "words";
  expect_error([&] { prepare_shards(opt); }, {"'words'"});
  opt.tokenizer = "bytes";
  opt.shard_tokens = 0;
  expect_error([&] { prepare_shards(opt); }, {"shard_tokens"});
  opt.shard_tokens = 100;
  opt.inputs = {};
  expect_error([&] { prepare_shards(opt); }, {"no input files"});
}

TEST(Prepare, ProgressGoesToStderr) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  PrepareOptions opt;
  opt.inputs = paths;
  opt.output_dir = dir.file("out");
  opt.progress = true;
  testing::internal::CaptureStderr();
  prepare_shards(opt);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("5/5 documents"), std::string::npos) << err;
  EXPECT_NE(err.find("MB/s"), std::string::npos) << err;
}

namespace {

// A stand-in for a large-vocabulary tokenizer: byte b is id offset + b, and the last id is the
// end-of-text token. `stray` (when >= 0) is emitted for '!' to test out-of-vocabulary ids.
class OffsetTokenizer : public odyssey::Tokenizer {
 public:
  OffsetTokenizer(int vocab, int offset, int stray = -1) : vocab_(vocab), offset_(offset), stray_(stray) {}
  std::vector<int> encode(std::string_view text) const override {
    std::vector<int> ids;
    for (unsigned char c : text) ids.push_back(c == '!' && stray_ >= 0 ? stray_ : offset_ + c);
    return ids;
  }
  std::string decode(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids) text.push_back(char(id - offset_));
    return text;
  }
  int vocab_size() const override { return vocab_; }
  int eot_id() const override { return vocab_ - 1; }
  std::string name() const override { return "offset"; }

 private:
  int vocab_, offset_, stray_;
};

int32_t header_int(const std::string& path, int index) {
  const auto bytes = odyssey::read_binary_file(path);
  int32_t v = 0;
  std::memcpy(&v, bytes.data() + 4 * index, 4);
  return v;
}

}  // namespace

// Above 65,536 ids prepare writes llm.c's uint32 shards; at 65,536 and below, uint16 shards.
TEST(Prepare, PicksTheTokenWidthFromTheVocabulary) {
  TempDir dir;
  std::vector<std::string> texts;
  auto paths = make_docs(dir, &texts);
  PrepareOptions opt;
  opt.inputs = paths;
  opt.val_fraction = 0.2;
  opt.progress = false;

  opt.output_dir = dir.file("wide");
  const OffsetTokenizer wide(128256, 100000);
  auto s = prepare_shards(opt, wide);
  EXPECT_EQ(s.width, odyssey::TokenWidth::u32);
  for (const auto& f : {s.train_files[0], s.val_files[0]}) {
    EXPECT_EQ(header_int(f, 0), 20240801) << f;
    EXPECT_EQ(header_int(f, 1), 7) << f;
    EXPECT_EQ(odyssey::TokenShard(f).width(), odyssey::TokenWidth::u32);
  }
  // Every document starts with the end-of-text id 128255; the rest are the bytes shifted by 100000.
  std::vector<int> ids;
  for (const auto& f : s.train_files) {
    odyssey::TokenShard shard(f);
    for (size_t i = 0; i < shard.size(); ++i) ids.push_back(int(shard[i]));
  }
  std::vector<int> expected;
  for (int d = 0; d < 4; ++d) {
    expected.push_back(128255);
    for (unsigned char c : texts[size_t(d)]) expected.push_back(100000 + c);
  }
  EXPECT_EQ(ids, expected);
  odyssey::TokenDataset data(opt.output_dir + "/train_*.bin", 8, 128256, false, 0);
  std::vector<int> in(8), tg(8);
  data.get_row(0, in.data(), tg.data());
  EXPECT_EQ(in, std::vector<int>(expected.begin(), expected.begin() + 8));

  // 65,536 ids still fit uint16: the highest id 65535 is the end-of-text token.
  opt.output_dir = dir.file("narrow");
  s = prepare_shards(opt, OffsetTokenizer(65536, 1000));
  EXPECT_EQ(s.width, odyssey::TokenWidth::u16);
  EXPECT_EQ(header_int(s.train_files[0], 0), 20240520);
  EXPECT_EQ(header_int(s.train_files[0], 1), 1);
  EXPECT_EQ(odyssey::TokenShard(s.train_files[0])[0], 65535u);

  // The byte tokenizer by name: uint16, as before.
  opt.output_dir = dir.file("bytes");
  s = prepare_shards(opt);
  EXPECT_EQ(s.width, odyssey::TokenWidth::u16);
  EXPECT_EQ(header_int(s.train_files[0], 0), 20240520);
}

TEST(Prepare, IdOutsideTheVocabularyIsRefused) {
  TempDir dir;
  const std::string doc = dir.file("doc.txt");
  odyssey::write_text_atomic(doc, "hello!");
  PrepareOptions opt;
  opt.inputs = {doc};
  opt.output_dir = dir.file("out");
  opt.progress = false;
  expect_error([&] { prepare_shards(opt, OffsetTokenizer(70000, 0, 70000)); }, {doc, "70000", "offset"});
  EXPECT_TRUE(shard_files(opt.output_dir).empty());  // nothing half-written
}
