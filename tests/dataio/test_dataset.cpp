#include "data_test_util.h"
#include "odyssey/data/dataset.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/data/token_shard.h"

namespace fs = std::filesystem;
using odyssey::Error;
using odyssey::TokenDataset;
using odyssey::write_token_shard;

namespace {

using odyssey::testing_data::expect_error;
using odyssey::testing_data::TempDir;

// Writes shards "s_000.bin", ... holding consecutive tokens 0, 1, 2, ... across all of them, so that a
// row is correct iff it is the range [start, start + T].
void write_consecutive(const TempDir& dir, const std::vector<size_t>& sizes) {
  uint16_t next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> tokens(sizes[s]);
    for (auto& t : tokens) t = next++;
    write_token_shard(dir.file(fmt::format("s_{:03d}.bin", s)), tokens);
  }
}

// The first input token of a row, after checking the row is the window [start, start + T].
int row_start(const TokenDataset& data, uint64_t row) {
  const int T = data.seq_len();
  std::vector<int> in(size_t(T), -1), tg(size_t(T), -1);
  data.get_row(row, in.data(), tg.data());
  for (int k = 0; k < T; ++k) {
    EXPECT_EQ(in[size_t(k)], in[0] + k) << "row " << row;
    EXPECT_EQ(tg[size_t(k)], in[0] + k + 1) << "row " << row;
  }
  EXPECT_EQ(in[0] % T, 0) << "row " << row;
  return in[0];
}

std::vector<int> epoch_starts(const TokenDataset& data, uint64_t epoch) {
  std::vector<int> starts;
  for (uint64_t r = 0; r < data.rows_per_epoch(); ++r)
    starts.push_back(row_start(data, epoch * data.rows_per_epoch() + r));
  return starts;
}

bool is_permutation_of_rows(std::vector<int> starts, int T) {
  std::sort(starts.begin(), starts.end());
  for (size_t i = 0; i < starts.size(); ++i) {
    if (starts[i] != int(i) * T) return false;
  }
  return true;
}

}  // namespace

TEST(TokenDataset, RowsFollowLlmcAcrossShards) {
  TempDir dir;
  write_consecutive(dir, {7, 0, 13, 5});  // 25 tokens; boundaries at 7 and 20, an empty shard
  TokenDataset data(dir.file("s_*.bin"), 4, 256, false, 0);
  EXPECT_EQ(data.total_tokens(), 25u);
  EXPECT_EQ(data.seq_len(), 4);
  EXPECT_EQ(data.rows_per_epoch(), 6u);  // (25 - 1) / 4
  for (uint64_t r = 0; r < 6; ++r) {
    std::vector<int> in(4), tg(4);
    data.get_row(r, in.data(), tg.data());
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(in[size_t(k)], int(r) * 4 + k);
      EXPECT_EQ(tg[size_t(k)], int(r) * 4 + k + 1);
    }
  }
  // Row 1 = tokens 4..8 crosses the 7|20... boundary; row 4 = 16..20 ends on the first token of shard 3.
  EXPECT_EQ(row_start(data, 1), 4);
  EXPECT_EQ(row_start(data, 4), 16);
  // The last row uses the final token; epochs wrap.
  EXPECT_EQ(row_start(data, 5), 20);
  EXPECT_EQ(row_start(data, 6), 0);
  EXPECT_EQ(row_start(data, 6 * 1000 + 5), 20);
}

TEST(TokenDataset, SinglePathAndExactFit) {
  TempDir dir;
  write_consecutive(dir, {9});
  TokenDataset data(dir.file("s_000.bin"), 8, 256, false, 0);
  EXPECT_EQ(data.rows_per_epoch(), 1u);
  EXPECT_EQ(row_start(data, 0), 0);
  EXPECT_EQ(row_start(data, 17), 0);
  TokenDataset t1(dir.file("s_000.bin"), 1, 256, true, 3);
  EXPECT_EQ(t1.rows_per_epoch(), 8u);
  EXPECT_TRUE(is_permutation_of_rows(epoch_starts(t1, 0), 1));
}

TEST(TokenDataset, GlobIsSorted) {
  TempDir dir;
  write_token_shard(dir.file("b.bin"), {10, 11, 12, 13, 14});  // created first, sorts last
  write_token_shard(dir.file("a.bin"), {5, 6, 7, 8, 9});
  TokenDataset data(dir.file("*.bin"), 4, 256, false, 0);
  std::vector<int> in(4), tg(4);
  data.get_row(0, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int>{5, 6, 7, 8}));
  data.get_row(1, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int>{9, 10, 11, 12}));
  EXPECT_EQ(tg, (std::vector<int>{10, 11, 12, 13}));
}

TEST(TokenDataset, ShuffleIsAPermutationPerEpoch) {
  TempDir dir;
  write_consecutive(dir, {400, 350, 251});  // 1001 tokens
  const int T = 3;
  TokenDataset data(dir.file("s_*.bin"), T, 1024, true, 1234);
  ASSERT_EQ(data.rows_per_epoch(), 333u);
  const auto e0 = epoch_starts(data, 0), e1 = epoch_starts(data, 1), e2 = epoch_starts(data, 2);
  EXPECT_TRUE(is_permutation_of_rows(e0, T));
  EXPECT_TRUE(is_permutation_of_rows(e1, T));
  EXPECT_TRUE(is_permutation_of_rows(e2, T));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  // Not the identity: a shuffle that leaves most rows in place would be useless.
  int fixed = 0;
  for (size_t i = 0; i < e0.size(); ++i) fixed += e0[i] == int(i) * T;
  EXPECT_LT(fixed, 20);

  // Deterministic in (seed, epoch), whichever object computes it; another seed gives another order.
  TokenDataset same(dir.file("s_*.bin"), T, 1024, true, 1234);
  EXPECT_EQ(epoch_starts(same, 1), e1);
  EXPECT_EQ(row_start(same, 2 * 333 + 17), e2[17]);
  TokenDataset other(dir.file("s_*.bin"), T, 1024, true, 99);
  EXPECT_NE(epoch_starts(other, 0), e0);
  EXPECT_TRUE(is_permutation_of_rows(epoch_starts(other, 0), T));
}

TEST(TokenDataset, ShuffleSmallSizes) {
  // Every row count from 1 to 70 (odd, even, powers of two and one past them) gives a permutation.
  TempDir dir;
  for (size_t rows = 1; rows <= 70; ++rows) {
    write_token_shard(dir.file("x.bin"), [&] {
      std::vector<uint16_t> t(rows * 2 + 1);
      std::iota(t.begin(), t.end(), uint16_t(0));
      return t;
    }());
    TokenDataset data(dir.file("x.bin"), 2, 256, true, 7);
    ASSERT_EQ(data.rows_per_epoch(), rows);
    EXPECT_TRUE(is_permutation_of_rows(epoch_starts(data, 0), 2)) << rows;
    EXPECT_TRUE(is_permutation_of_rows(epoch_starts(data, 5), 2)) << rows;
  }
}

TEST(TokenDataset, Errors) {
  TempDir dir;
  expect_error([&] { TokenDataset d(dir.file("train_*.bin"), 4, 256, false, 0); },
               {dir.file("train_*.bin"), "matches no files"});
  expect_error([&] { TokenDataset d(dir.file("missing.bin"), 4, 256, false, 0); },
               {dir.file("missing.bin"), "cannot open"});

  write_consecutive(dir, {3, 2});  // 5 tokens
  expect_error([&] { TokenDataset d(dir.file("s_*.bin"), 5, 256, false, 0); },
               {dir.file("s_*.bin"), "5 tokens", "fewer than seq_len + 1 = 6"});
  TokenDataset ok(dir.file("s_*.bin"), 4, 256, false, 0);
  EXPECT_EQ(ok.rows_per_epoch(), 1u);

  // A token >= vocab in the second shard: its file and byte offset (token 1 of s_001 holds id 4).
  expect_error([&] { TokenDataset d(dir.file("s_*.bin"), 2, 4, false, 0); },
               {dir.file("s_001.bin"), "token id 4", "byte offset 1026"});
  expect_error([&] { TokenDataset d(dir.file("s_*.bin"), 0, 256, false, 0); }, {"sequence length"});
  expect_error([&] { TokenDataset d(dir.file("s_*.bin"), 2, 0, false, 0); }, {"vocabulary size", "0"});
  // A vocabulary above uint16 is no error: a uint16 shard simply holds ids below 65536.
  TokenDataset wide(dir.file("s_*.bin"), 2, 128256, false, 0);
  EXPECT_EQ(wide.rows_per_epoch(), 2u);
}

// The same tokens as uint16 and as uint32 shards, and mixed, give the same rows, in order and
// shuffled, across shard boundaries.
TEST(TokenDataset, Uint32ShardsGiveTheSameRows) {
  TempDir dir;
  const std::vector<size_t> sizes = {400, 0, 351, 250};
  uint32_t next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint32_t> tokens(sizes[s]);
    for (auto& t : tokens) t = (next++ * 7919u) % 50000u;
    const std::string name = fmt::format("{:03d}.bin", s);
    write_token_shard(dir.file("u16_" + name), tokens, odyssey::TokenWidth::u16);
    write_token_shard(dir.file("u32_" + name), tokens, odyssey::TokenWidth::u32);
    // Mixed: even shards uint16, odd shards uint32.
    write_token_shard(dir.file("mix_" + name), tokens,
                      s % 2 ? odyssey::TokenWidth::u32 : odyssey::TokenWidth::u16);
  }
  for (bool shuffle : {false, true}) {
    const int T = 7;
    TokenDataset narrow(dir.file("u16_*.bin"), T, 50000, shuffle, 5);
    TokenDataset wide(dir.file("u32_*.bin"), T, 50000, shuffle, 5);
    TokenDataset mixed(dir.file("mix_*.bin"), T, 50000, shuffle, 5);
    ASSERT_EQ(wide.total_tokens(), narrow.total_tokens());
    ASSERT_EQ(wide.rows_per_epoch(), narrow.rows_per_epoch());
    ASSERT_EQ(mixed.rows_per_epoch(), narrow.rows_per_epoch());
    for (uint64_t r = 0; r < 2 * narrow.rows_per_epoch(); ++r) {
      std::vector<int> in16(T), tg16(T), in32(T, -1), tg32(T, -1), inmix(T, -1), tgmix(T, -1);
      narrow.get_row(r, in16.data(), tg16.data());
      wide.get_row(r, in32.data(), tg32.data());
      mixed.get_row(r, inmix.data(), tgmix.data());
      ASSERT_EQ(in32, in16) << "row " << r << " shuffle " << shuffle;
      ASSERT_EQ(tg32, tg16) << "row " << r << " shuffle " << shuffle;
      ASSERT_EQ(inmix, in16) << "row " << r << " shuffle " << shuffle;
      ASSERT_EQ(tgmix, tg16) << "row " << r << " shuffle " << shuffle;
    }
  }
}

// A 128K vocabulary over uint32 shards: ids above 65535 reach the rows; an id >= vocab is refused
// naming the file and the byte offset (4 bytes a token).
TEST(TokenDataset, LargeVocabulary) {
  TempDir dir;
  std::vector<uint32_t> tokens(41);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(128255 - i * 1000);
  write_token_shard(dir.file("big.bin"), tokens, odyssey::TokenWidth::u32);
  TokenDataset data(dir.file("big.bin"), 8, 128256, false, 0);
  std::vector<int> in(8), tg(8);
  data.get_row(0, in.data(), tg.data());
  EXPECT_EQ(in[0], 128255);
  EXPECT_EQ(tg[7], 128255 - 8000);
  expect_error([&] { TokenDataset d(dir.file("big.bin"), 8, 128000, false, 0); },
               {dir.file("big.bin"), "token id 128255", "byte offset 1024"});
  tokens[10] = 200000;
  write_token_shard(dir.file("big.bin"), tokens, odyssey::TokenWidth::u32);
  expect_error([&] { TokenDataset d(dir.file("big.bin"), 8, 128256, false, 0); },
               {dir.file("big.bin"), "token id 200000", "byte offset 1064"});
}
