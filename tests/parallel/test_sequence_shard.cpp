// Sequence slicing: every layout's shards partition the row, zigzag gives ring rank r chunks r and
// 2R-1-r, Ulysses pieces concatenate to their ring rank's tokens (dealt by chunk: each chunk's pieces
// concatenate to a contiguous segment), and impossible lengths are errors that state the rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/parallel/sequence_shard.h"

namespace odyssey {
namespace {

std::vector<int> range(int a, int b) {
  std::vector<int> v;
  for (int i = a; i < b; ++i) v.push_back(i);
  return v;
}
std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SequenceShard, ZigzagRingHoldsChunksRAnd2RMinus1MinusR) {
  // T = 16, R = 4: chunks of 2; ring rank 1 holds chunks 1 and 6.
  EXPECT_EQ(shard_positions(16, {1, 4, 0, 1, RingLayout::zigzag}), (std::vector<int>{2, 3, 12, 13}));
  EXPECT_EQ(shard_positions(16, {1, 4, 0, 0, RingLayout::zigzag}), (std::vector<int>{0, 1, 14, 15}));
  EXPECT_EQ(shard_positions(16, {1, 4, 0, 3, RingLayout::contiguous}), range(12, 16));
}

TEST(SequenceShard, UlyssesSplitsTheRingRanksTokensContiguously) {
  // U = 2, R = 2 zigzag, T = 12: ring rank 0 holds [0..3) + [9..12); Ulysses rank 1 the second half.
  EXPECT_EQ(shard_positions(12, {2, 2, 0, 0, RingLayout::zigzag}), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(shard_positions(12, {2, 2, 1, 0, RingLayout::zigzag}), (std::vector<int>{9, 10, 11}));
  // U = 3, R = 2, T = 12 (lcm(4, 6) = 12): a Ulysses piece may straddle the two chunks.
  EXPECT_EQ(shard_positions(12, {3, 2, 1, 0, RingLayout::zigzag}), (std::vector<int>{2, 9}));
  // Without a ring both layouts are the contiguous split.
  EXPECT_EQ(shard_positions(12, {4, 1, 2, 0, RingLayout::zigzag}), range(6, 9));
}

TEST(SequenceShard, UlyssesDealtByChunkRebuildsContiguousSegments) {
  // U = 3, T = 30: Tl = 10 in chunks of 4, 4, 2; chunk k of every rank is segment [12 k, 12 k + 3 m).
  EXPECT_EQ(shard_positions(30, {3, 1, 0, 0, RingLayout::zigzag, 4}),
            cat(cat(range(0, 4), range(12, 16)), range(24, 26)));
  EXPECT_EQ(shard_positions(30, {3, 1, 2, 0, RingLayout::zigzag, 4}),
            cat(cat(range(8, 12), range(20, 24)), range(28, 30)));
  // A chunk of Tl or more (or 0): the contiguous split.
  EXPECT_EQ(shard_positions(30, {3, 1, 1, 0, RingLayout::zigzag, 10}), range(10, 20));
  EXPECT_EQ(shard_positions(30, {3, 1, 1, 0, RingLayout::zigzag, 64}), range(10, 20));
  for (int U : {2, 3, 4})
    for (int chunk : {1, 3, 4, 7}) {
      const int T = U * 13, Tl = 13;
      std::vector<int> all;
      for (int k = 0; k * chunk < Tl; ++k) {  // local chunk k of every rank, in rank order
        const int m = std::min(chunk, Tl - k * chunk);
        for (int u = 0; u < U; ++u) {
          const std::vector<int> mine = shard_positions(T, {U, 1, u, 0, RingLayout::zigzag, chunk});
          all.insert(all.end(), mine.begin() + k * chunk, mine.begin() + k * chunk + m);
        }
      }
      EXPECT_EQ(all, range(0, T)) << "U " << U << ", chunk " << chunk;
    }
}

TEST(SequenceShard, EveryLayoutPartitionsTheRow) {
  for (RingLayout layout : {RingLayout::zigzag, RingLayout::contiguous})
    for (int U : {1, 2, 3})
      for (int R : {1, 2, 4}) {
        const int T = 2 * U * R * 5;
        std::vector<int> all;
        for (int r = 0; r < R; ++r) {
          std::vector<int> ring_tokens;
          for (int u = 0; u < U; ++u)
            ring_tokens = cat(ring_tokens, shard_positions(T, {U, R, u, r, layout}));
          EXPECT_EQ(ring_tokens, shard_positions(T, {1, R, 0, r, layout}));  // what the a2a rebuilds
          all = cat(all, ring_tokens);
        }
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all, range(0, T)) << U << "x" << R << " " << enum_name(kRingLayoutNames, layout);
      }
}

TEST(SequenceShard, RowsAreSlicedByPosition) {
  const std::vector<int32_t> src = {10, 11, 12, 13, 20, 21, 22, 23};  // [B = 2, T = 4]
  std::vector<int32_t> dst(4);
  shard_rows(dst.data(), src.data(), 2, 4, {0, 3});
  EXPECT_EQ(dst, (std::vector<int32_t>{10, 13, 20, 23}));
}

TEST(SequenceShard, ImpossibleLengthsStateTheRule) {
  auto message = [](int T, SequenceShard s) -> std::string {
    try {
      check_sequence_shard(T, s);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(20, {1, 4, 0, 0, RingLayout::zigzag}).find("multiple of 2*sp_ring=8"), std::string::npos);
  EXPECT_NE(message(20, {4, 2, 0, 0, RingLayout::zigzag}).find("sp_ulysses"), std::string::npos);  // 10 % 4
  EXPECT_EQ(message(20, {1, 4, 0, 0, RingLayout::contiguous}), "");
  EXPECT_NE(message(18, {1, 4, 0, 0, RingLayout::contiguous}).find("not a multiple"), std::string::npos);
  EXPECT_EQ(message(12, {3, 2, 0, 0, RingLayout::zigzag}), "");
  EXPECT_THROW(parse_enum(kRingLayoutNames, "stripe", "parallel.sp_ring_layout"), Error);
}

}  // namespace
}  // namespace odyssey
