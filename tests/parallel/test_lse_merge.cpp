// The LSE merge: attention over keys split into blocks, merged, equals attention over all keys;
// rows that saw nothing (-inf) are handled; lse gaps of 1e4 do not overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "odyssey/kernels/attention.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/parallel/lse_merge.h"

namespace odyssey {
namespace {

std::vector<float> random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(LseMerge, BlocksMergeToTheWholeAttention) {
  const int B = 2, Tq = 37, Tk = 90, H = 3, D = 24;
  const float scale = 1.0f / std::sqrt(float(D));
  const auto q = random(size_t(B) * Tq * H * D, 1), k = random(size_t(B) * Tk * H * D, 2),
             v = random(size_t(B) * Tk * H * D, 3);
  std::vector<float> out(q.size()), lse(size_t(B) * H * Tq);
  const AttentionDims all{B, Tq, Tk, H, H, D};
  // Queries at positions 60.., keys 0..89: causal, so some keys are hidden from early rows.
  const AttentionMask mask{MaskKind::causal, 60, 0};
  attention_forward(heads_view(out.data(), Tq, H, D), lse.data(), heads_view(q.data(), Tq, H, D),
                    heads_view(k.data(), Tk, H, D), heads_view(v.data(), Tk, H, D), all, mask, scale);

  std::vector<float> acc(q.size(), 0.0f), acc_lse(lse.size(), -std::numeric_limits<float>::infinity());
  std::vector<float> blk(q.size()), blk_lse(lse.size());
  for (int k0 : {50, 0, 80}) {  // any order
    const int n = k0 == 80 ? 10 : k0 == 50 ? 30 : 50;
    const HeadsView kb{k.data() + int64_t(k0) * H * D, int64_t(Tk) * H * D, int64_t(H) * D};
    const HeadsView vb{v.data() + int64_t(k0) * H * D, int64_t(Tk) * H * D, int64_t(H) * D};
    attention_forward(heads_view(blk.data(), Tq, H, D), blk_lse.data(), heads_view(q.data(), Tq, H, D), kb,
                      vb, {B, Tq, n, H, H, D}, {MaskKind::causal, 60, k0}, scale);
    merge_attention_block(heads_view(acc.data(), Tq, H, D), acc_lse.data(), Tq,
                          as_const(heads_view(blk.data(), Tq, H, D)), blk_lse.data(), B, Tq, H, D);
  }
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(acc[i], out[i], 2e-6) << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(acc_lse[i], lse[i], 2e-6) << i;
}

TEST(LseMerge, EmptyRowsAndHugeGaps) {
  const float inf = std::numeric_limits<float>::infinity();
  // One batch, one head, D = 1, three rows: (empty + b), (a + empty), (a + b far apart).
  std::vector<float> acc = {0.0f, 2.0f, 1.0f}, acc_lse = {-inf, 5.0f, 1e4f};
  const std::vector<float> blk = {3.0f, 7.0f, 4.0f}, blk_lse = {1.0f, -inf, -1e4f};
  merge_attention_block({acc.data(), 3, 1}, acc_lse.data(), 3, {blk.data(), 3, 1}, blk_lse.data(), 1, 3, 1,
                        1);
  EXPECT_EQ(acc[0], 3.0f);
  EXPECT_EQ(acc_lse[0], 1.0f);
  EXPECT_EQ(acc[1], 2.0f);
  EXPECT_EQ(acc_lse[1], 5.0f);
  EXPECT_EQ(acc[2], 1.0f);
  EXPECT_EQ(acc_lse[2], 1e4f);
  // Equal lse: the average, lse + log 2.
  std::vector<float> a = {1.0f}, la = {30.0f};
  const std::vector<float> b = {3.0f}, lb = {30.0f};
  merge_attention_block({a.data(), 1, 1}, la.data(), 1, {b.data(), 1, 1}, lb.data(), 1, 1, 1, 1);
  EXPECT_NEAR(a[0], 2.0f, 1e-6);
  EXPECT_FLOAT_EQ(la[0], 30.0f + std::log(2.0f));
}

}  // namespace
}  // namespace odyssey
