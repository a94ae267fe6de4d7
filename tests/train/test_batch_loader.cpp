// BatchLoader: for every dp x sp (Ulysses x ring, zigzag and contiguous) x micro-batch split, the
// ranks' rows and sequence pieces tile each optimizer step's global batch exactly, as llm.c's
// dataloader test checks ranges. The loader is shared by the reference and every parallel run, so a
// tiling bug would cancel out of the parity tests; this checks it against the definition instead.
//
// The data holds tokens 0, 1, 2, ... (token = its global index), so a loaded input token t names its
// own place: data row t / T, position t % T, and its target must be t + 1.
#include "odyssey/train/batch_loader.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "odyssey/data/dataset.h"
#include "odyssey/data/token_shard.h"

namespace odyssey {
namespace {

constexpr int kT = 24;  // splits over every layout below (multiple of 2R, (T/R) % U == 0)

struct TempShard {
  std::string dir, path;
  explicit TempShard(size_t n_tokens) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ody_loader_XXXXXX").string();
    dir = mkdtemp(tmpl.data());
    path = dir + "/tokens.bin";
    std::vector<uint32_t> tokens(n_tokens);
    std::iota(tokens.begin(), tokens.end(), 0u);
    write_token_shard(path, tokens, TokenWidth::u32);
  }
  ~TempShard() { std::filesystem::remove_all(dir); }
};

struct SpLayout {
  int ulysses, ring;
  RingLayout layout;
};

// Every sequence-parallel layout of 1..4 ranks.
std::vector<SpLayout> sp_layouts() {
  std::vector<SpLayout> out;
  for (int U = 1; U <= 4; ++U)
    for (int R = 1; U * R <= 4; ++R)
      for (RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag}) {
        if (R == 1 && layout == RingLayout::zigzag) continue;  // the same split as contiguous
        out.push_back({U, R, layout});
      }
  return out;
}

TEST(BatchLoader, RanksTileTheGlobalBatch) {
  const int kSteps = 3, kMaxGlobal = 8;
  TempShard shard(size_t(kSteps * kMaxGlobal * kT + 1));
  const TokenDataset data(shard.path, kT, kSteps * kMaxGlobal * kT + 1, false, 0);
  int splits = 0;
  for (int dp = 1; dp <= 4; ++dp) {
    for (const SpLayout& sp : sp_layouts()) {
      for (int global = dp; global <= kMaxGlobal; ++global) {
        for (int micro = 1; micro * dp <= global; ++micro) {
          if (global % (micro * dp) != 0) continue;  // the trainer requires whole micro-steps
          const int accum = global / (micro * dp);
          const int Tl = kT / (sp.ulysses * sp.ring);
          ++splits;
          SCOPED_TRACE(::testing::Message() << "dp " << dp << " ulysses " << sp.ulysses << " ring " << sp.ring
                                            << " " << enum_name(kRingLayoutNames, sp.layout) << " global "
                                            << global << " micro " << micro);
          for (int64_t step = 0; step < kSteps; ++step) {
            // covered[row][pos]: how many (rank, micro-step) loads hold token pos of the step's row.
            std::vector<int> covered(size_t(global) * kT, 0);
            for (int d = 0; d < dp; ++d) {
              for (int m = 0; m < accum; ++m) {
                std::vector<int> rows_of_group;  // the data rows of the SP group's first rank
                for (int u = 0; u < sp.ulysses; ++u) {
                  for (int r = 0; r < sp.ring; ++r) {
                    BatchLoader loader(data, global, micro, d, dp, {sp.ulysses, sp.ring, u, r, sp.layout});
                    ASSERT_EQ(loader.rows(), micro);
                    ASSERT_EQ(loader.local_len(), Tl);
                    std::vector<int> in(size_t(micro) * Tl, -1), tg(size_t(micro) * Tl, -1);
                    loader.load(step, m, in.data(), tg.data());
                    std::vector<int> rows;
                    for (int b = 0; b < micro; ++b) {
                      const int t0 = in[size_t(b) * Tl];
                      rows.push_back(t0 / kT);
                      // DP rank d's rows in micro-step m: [(m D + d) b, (m D + d + 1) b) of the step.
                      EXPECT_EQ(t0 / kT, step * global + (m * dp + d) * micro + b);
                      for (int i = 0; i < Tl; ++i) {
                        const int t = in[size_t(b) * Tl + size_t(i)];
                        const int row = t / kT, pos = t % kT;
                        EXPECT_EQ(row, t0 / kT) << "a row's tokens come from one data row";
                        EXPECT_EQ(pos, loader.positions()[i])
                            << "the position is the token's place in its row";
                        EXPECT_EQ(tg[size_t(b) * Tl + size_t(i)], t + 1) << "the target is the next token";
                        const int64_t local_row = row - step * global;
                        ASSERT_GE(local_row, 0);
                        ASSERT_LT(local_row, global);
                        ++covered[size_t(local_row) * kT + size_t(pos)];
                      }
                    }
                    // Every rank of a sequence-parallel group holds pieces of the same rows.
                    if (u == 0 && r == 0) rows_of_group = rows;
                    EXPECT_EQ(rows, rows_of_group);
                  }
                }
              }
            }
            for (int row = 0; row < global; ++row)
              for (int pos = 0; pos < kT; ++pos)
                ASSERT_EQ(covered[size_t(row) * kT + size_t(pos)], 1)
                    << "step " << step << " row " << row << " position " << pos;
          }
        }
      }
    }
  }
  EXPECT_GT(splits, 200);  // the sweep really ran (dp 1..4 x 9 SP layouts x micro-batch splits)
}

// The layouts' positions by name: zigzag ring rank r holds chunks r and 2R-1-r of T/2R tokens, and
// Ulysses rank u the u-th contiguous piece of them.
TEST(BatchLoader, ZigzagAndUlyssesPieces) {
  TempShard shard(kT * 4 + 1);
  const TokenDataset data(shard.path, kT, 1000, false, 0);
  auto positions = [&](int U, int R, int u, int r, RingLayout layout) {
    BatchLoader loader(data, 2, 1, 0, 2, {U, R, u, r, layout});
    return std::vector<int>(loader.positions(), loader.positions() + loader.local_len());
  };
  // R = 2 zigzag: chunks of 6; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(positions(1, 2, 0, 0, RingLayout::zigzag),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(positions(1, 2, 0, 1, RingLayout::zigzag),
            (std::vector<int>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}));
  // With Ulysses 2 inside ring rank 0, the two halves of its zigzag tokens.
  EXPECT_EQ(positions(2, 2, 1, 0, RingLayout::zigzag), (std::vector<int>{18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(positions(1, 2, 0, 1, RingLayout::contiguous),
            (std::vector<int>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
  // Loaded tokens follow the positions: dp rank 1 of 2, step 1 -> data row 1 * 2 + 1 = 3.
  BatchLoader loader(data, 2, 1, 1, 2, {1, 2, 0, 1, RingLayout::zigzag});
  std::vector<int> in(12), tg(12);
  loader.load(1, 0, in.data(), tg.data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(in[size_t(i)], 3 * kT + 6 + i);
}

// Evaluation reads rows [first, first + rows()) and pads past `limit` with targets -1 (uncounted).
TEST(BatchLoader, LoadRowsPadsPastTheLimit) {
  TempShard shard(kT * 10 + 1);
  const TokenDataset data(shard.path, kT, 1000, false, 0);
  BatchLoader loader(data, 4, 4, 0, 1, {2, 1, 1, 0, RingLayout::contiguous});
  const int Tl = loader.local_len();
  ASSERT_EQ(Tl, kT / 2);
  std::vector<int> in(size_t(4 * Tl)), tg(size_t(4 * Tl));
  loader.load_rows(5, 7, in.data(), tg.data());  // rows 5 and 6 are real, the other two padding
  for (int b = 0; b < 4; ++b)
    for (int i = 0; i < Tl; ++i) {
      const size_t k = size_t(b * Tl + i);
      if (b < 2) {
        EXPECT_EQ(in[k], (5 + b) * kT + Tl + i);
        EXPECT_EQ(tg[k], in[k] + 1);
      } else {
        EXPECT_EQ(in[k], 0);
        EXPECT_EQ(tg[k], -1);
      }
    }
}

}  // namespace
}  // namespace odyssey
