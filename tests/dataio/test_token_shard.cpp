#include "data_test_util.h"
#include "odyssey/data/token_shard.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace fs = std::filesystem;
using odyssey::Error;
using odyssey::TokenShard;
using odyssey::TokenWidth;
using odyssey::write_token_shard;

namespace {

using odyssey::testing_data::expect_error;
using odyssey::testing_data::TempDir;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t first = 0) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(first + i);
  return t;
}

}  // namespace

TEST(TokenShard, RoundTrip) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  std::vector<uint16_t> tokens = {0, 1, 50256, 65535, 7, 7};
  write_token_shard(path, tokens);
  TokenShard shard(path);
  EXPECT_EQ(shard.path(), path);
  ASSERT_EQ(shard.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(shard[i], tokens[i]);
  EXPECT_EQ(shard.width(), odyssey::TokenWidth::u16);
  EXPECT_EQ(std::memcmp(shard.tokens16(), tokens.data(), tokens.size() * 2), 0);

  // llm.c layout: 256 int32 header (magic, version, count, zeros), then the uint16 tokens.
  auto bytes = odyssey::read_binary_file(path);
  ASSERT_EQ(bytes.size(), 1024 + tokens.size() * 2);
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], int32_t(tokens.size()));
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0);

  // Atomic write: no temporary file is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(TokenShard, EmptyShardAndMove) {
  TempDir dir;
  write_token_shard(dir.file("empty.bin"), {});
  TokenShard empty(dir.file("empty.bin"));
  EXPECT_EQ(empty.size(), 0u);
  empty.check_vocab(1);

  write_token_shard(dir.file("b.bin"), iota_tokens(100));
  TokenShard a(dir.file("b.bin"));
  TokenShard b(std::move(a));
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(b[99], 99);
  empty = std::move(b);
  EXPECT_EQ(empty.size(), 100u);
  EXPECT_EQ(empty[42], 42);
}

TEST(TokenShard, MissingFile) {
  TempDir dir;
  expect_error([&] { TokenShard s(dir.file("nope.bin")); }, {dir.file("nope.bin"), "cannot open"});
}

TEST(TokenShard, TruncatedHeader) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  write_bytes(path, std::vector<uint8_t>(100, 0));
  expect_error([&] { TokenShard s(path); }, {path, "truncated header", "byte offset 100"});
  write_bytes(path, {});
  expect_error([&] { TokenShard s(path); }, {path, "truncated header", "byte offset 0"});
}

TEST(TokenShard, WrongMagic) {
  TempDir dir;
  const std::string path = dir.file("magic.bin");
  write_token_shard(path, iota_tokens(4));
  auto bytes = odyssey::read_binary_file(path);
  int32_t bad = 12345;
  std::memcpy(bytes.data(), &bad, 4);
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); },
               {path, "magic", "12345", "byte offset 0", "20240520", "20240801"});
}

TEST(TokenShard, WrongVersion) {
  TempDir dir;
  const std::string path = dir.file("version.bin");
  write_token_shard(path, iota_tokens(4));
  auto bytes = odyssey::read_binary_file(path);
  int32_t v2 = 2;
  std::memcpy(bytes.data() + 4, &v2, 4);
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "version 2", "byte offset 4"});
  // Each magic goes with its own version: the uint32 magic with the uint16 version 1 is refused.
  int32_t magic32 = 20240801, v1 = 1;
  std::memcpy(bytes.data(), &magic32, 4);
  std::memcpy(bytes.data() + 4, &v1, 4);
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "version 1", "byte offset 4", "expects version 7"});
}

TEST(TokenShard, TruncatedBody) {
  TempDir dir;
  const std::string path = dir.file("body.bin");
  write_token_shard(path, iota_tokens(10));
  auto bytes = odyssey::read_binary_file(path);
  bytes.resize(1024 + 15);  // 7.5 tokens of 10
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "truncated body", "byte offset 1039", "byte offset 1044"});
}

TEST(TokenShard, ExtraBytes) {
  TempDir dir;
  const std::string path = dir.file("extra.bin");
  write_token_shard(path, iota_tokens(10));
  auto bytes = odyssey::read_binary_file(path);
  bytes.insert(bytes.end(), {1, 2, 3});
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "3 unexpected bytes", "byte offset 1044"});
}

TEST(TokenShard, NegativeCount) {
  TempDir dir;
  const std::string path = dir.file("neg.bin");
  write_token_shard(path, {});
  auto bytes = odyssey::read_binary_file(path);
  int32_t n = -5;
  std::memcpy(bytes.data() + 8, &n, 4);
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "-5", "byte offset 8"});
}

TEST(TokenShard, CheckVocabNamesFileAndOffset) {
  TempDir dir;
  const std::string path = dir.file("vocab.bin");
  std::vector<uint16_t> tokens = iota_tokens(5000, 0);
  for (auto& t : tokens) t %= 256;
  tokens[3000] = 300;  // the first bad token: byte offset 1024 + 2*3000
  tokens[4000] = 999;
  write_token_shard(path, tokens);
  TokenShard shard(path);
  shard.check_vocab(1000);
  shard.check_vocab(65536);
  expect_error([&] { shard.check_vocab(256); }, {path, "token id 300", "byte offset 7024", "256"});
  expect_error([&] { shard.check_vocab(500); }, {path, "token id 999", "byte offset 9024"});
}

// llm.c's uint32 shards (dev/data/data_common.py, "llama-3"): magic 20240801, version 7, uint32 body.
TEST(TokenShard, RoundTripUint32) {
  TempDir dir;
  const std::string path = dir.file("u32.bin");
  const std::vector<uint32_t> tokens = {0, 1, 65535, 65536, 128255, 0xFFFFFFFFu, 7};
  write_token_shard(path, tokens, TokenWidth::u32);
  TokenShard shard(path);
  EXPECT_EQ(shard.width(), TokenWidth::u32);
  ASSERT_EQ(shard.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(shard[i], tokens[i]);
  EXPECT_EQ(std::memcmp(shard.tokens32(), tokens.data(), tokens.size() * 4), 0);
  expect_error([&] { shard.tokens16(); }, {path, "uint32"});

  auto bytes = odyssey::read_binary_file(path);
  ASSERT_EQ(bytes.size(), 1024 + tokens.size() * 4);
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], int32_t(tokens.size()));
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

// The width-taking writer at uint16 gives exactly the bytes of the uint16 writer (existing data stays
// byte-identical), and refuses an id that does not fit, naming file and index, writing nothing.
TEST(TokenShard, WidthWriterUint16) {
  TempDir dir;
  const std::vector<uint32_t> wide = {3, 65535, 0, 42};
  write_token_shard(dir.file("a.bin"), wide, TokenWidth::u16);
  write_token_shard(dir.file("b.bin"), std::vector<uint16_t>{3, 65535, 0, 42});
  EXPECT_EQ(odyssey::read_binary_file(dir.file("a.bin")), odyssey::read_binary_file(dir.file("b.bin")));
  EXPECT_EQ(TokenShard(dir.file("a.bin")).width(), TokenWidth::u16);
  expect_error([&] { TokenShard(dir.file("a.bin")).tokens32(); }, {"uint16"});

  const std::vector<uint32_t> too_wide = {1, 2, 65536, 70000};
  expect_error([&] { write_token_shard(dir.file("c.bin"), too_wide, TokenWidth::u16); },
               {dir.file("c.bin"), "token 2", "65536", "uint16"});
  EXPECT_FALSE(fs::exists(dir.file("c.bin")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 2);
}

TEST(TokenShard, WidthForVocabulary) {
  EXPECT_EQ(odyssey::token_width_for_vocab(256), TokenWidth::u16);
  EXPECT_EQ(odyssey::token_width_for_vocab(50257), TokenWidth::u16);
  EXPECT_EQ(odyssey::token_width_for_vocab(65536), TokenWidth::u16);  // ids 0..65535 fit
  EXPECT_EQ(odyssey::token_width_for_vocab(65537), TokenWidth::u32);
  EXPECT_EQ(odyssey::token_width_for_vocab(128256), TokenWidth::u32);
}

TEST(TokenShard, Uint32CorruptSizes) {
  TempDir dir;
  const std::string path = dir.file("u32.bin");
  std::vector<uint32_t> tokens(10);
  std::iota(tokens.begin(), tokens.end(), 100000u);
  write_token_shard(path, tokens, TokenWidth::u32);
  const auto good = odyssey::read_binary_file(path);

  auto bytes = good;
  bytes.resize(1024 + 30);  // 7.5 tokens of 10
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "truncated body", "byte offset 1054", "byte offset 1064"});

  bytes = good;
  bytes.insert(bytes.end(), {1, 2});
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "2 unexpected bytes", "byte offset 1064"});

  // A uint16 count over a uint32 body: the header claims twice the tokens the file holds bytes for.
  bytes = good;
  int32_t n = 20;
  std::memcpy(bytes.data() + 8, &n, 4);
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "truncated body", "20 tokens", "byte offset 1104"});

  write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + 1000));
  expect_error([&] { TokenShard s(path); }, {path, "truncated header", "byte offset 1000"});
}

TEST(TokenShard, Uint32CheckVocab) {
  TempDir dir;
  const std::string path = dir.file("vocab32.bin");
  std::vector<uint32_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(i * 37 % 128256);
  tokens[3000] = 128256;  // the first bad token at vocab 128256: byte offset 1024 + 4*3000
  tokens[4000] = 0xFFFFFFFFu;
  write_token_shard(path, tokens, TokenWidth::u32);
  TokenShard shard(path);
  expect_error([&] { shard.check_vocab(128256); },
               {path, "token id 128256", "byte offset 13024", "token 3000"});
  tokens[3000] = 5;
  write_token_shard(path, tokens, TokenWidth::u32);
  TokenShard again(path);
  expect_error([&] { again.check_vocab(128256); }, {path, "token id 4294967295", "byte offset 17024"});
  tokens[4000] = 6;
  write_token_shard(path, tokens, TokenWidth::u32);
  TokenShard(path).check_vocab(128256);
}
