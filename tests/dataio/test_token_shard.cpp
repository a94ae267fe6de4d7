#include "data_test_util.h"
#include "odyssey/data/token_shard.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace fs = std::filesystem;
using odyssey::Error;
using odyssey::TokenShard;
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
  EXPECT_EQ(std::memcmp(shard.tokens(), tokens.data(), tokens.size() * 2), 0);

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
  expect_error([&] { TokenShard s(path); }, {path, "magic", "12345", "byte offset 0"});
}

TEST(TokenShard, WrongVersion) {
  TempDir dir;
  const std::string path = dir.file("version.bin");
  write_token_shard(path, iota_tokens(4));
  auto bytes = odyssey::read_binary_file(path);
  int32_t v2 = 2;  // llm.c's uint32 (llama 3) shards
  std::memcpy(bytes.data() + 4, &v2, 4);
  write_bytes(path, bytes);
  expect_error([&] { TokenShard s(path); }, {path, "version 2", "byte offset 4"});
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
