// LocalAttention over a GQA fused qkv [B, T, (H + 2 Hkv) D] computes what it computes over the
// same qkv with each key/value head repeated for its H / Hkv query heads (Hugging Face's repeat_kv):
// the same out and lse, the same dq, and dk, dv the sums of the repeated heads' gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "odyssey/model/attention_op.h"

namespace odyssey {
namespace {

TEST(LocalAttention, GqaEqualsRepeatedKvHeads) {
  const int B = 2, T = 13, H = 6, D = 8;
  for (int Hkv : {1, 2, 3, 6}) {
    const int group = H / Hkv, W = (H + 2 * Hkv) * D, We = 3 * H * D;
    std::vector<float> qkv(size_t(B * T * W)), expanded(size_t(B * T * We));
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.37f * float(i)) * 0.8f;
    // expanded: q as is; query head h reads kv head h / group.
    for (int r = 0; r < B * T; ++r) {
      const float* in = qkv.data() + size_t(r) * W;
      float* out = expanded.data() + size_t(r) * We;
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const int kv = h / group;
          out[h * D + d] = in[h * D + d];
          out[(H + h) * D + d] = in[(H + kv) * D + d];
          out[(2 * H + h) * D + d] = in[(H + Hkv + kv) * D + d];
        }
    }
    LocalAttention gqa(Hkv), mha;
    std::vector<float> out(size_t(B * T * H * D)), out_e(out.size()), lse(size_t(B * H * T)),
        lse_e(lse.size());
    AttentionSavedPtr saved, saved_e;
    gqa.forward(out.data(), lse.data(), qkv.data(), B, T, H, D, saved);
    mha.forward(out_e.data(), lse_e.data(), expanded.data(), B, T, H, D, saved_e);
    EXPECT_EQ(out, out_e) << "Hkv " << Hkv;
    EXPECT_EQ(lse, lse_e) << "Hkv " << Hkv;

    std::vector<float> dout(out.size());
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.11f * float(i));
    std::vector<float> dqkv(qkv.size(), 0.0f), dexp(expanded.size(), 0.0f);
    gqa.backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, H, D, saved.get());
    mha.backward(dexp.data(), dout.data(), out_e.data(), lse_e.data(), expanded.data(), B, T, H, D,
                 saved_e.get());
    for (int r = 0; r < B * T; ++r) {
      const float* g = dqkv.data() + size_t(r) * W;
      const float* e = dexp.data() + size_t(r) * We;
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) EXPECT_EQ(g[h * D + d], e[h * D + d]) << "dq, Hkv " << Hkv;
      for (int kv = 0; kv < Hkv; ++kv)
        for (int d = 0; d < D; ++d) {
          double dk = 0, dv = 0;
          for (int h = kv * group; h < (kv + 1) * group; ++h)
            dk += e[(H + h) * D + d], dv += e[(2 * H + h) * D + d];
          EXPECT_NEAR(g[(H + kv) * D + d], dk, 1e-5 * (1 + std::abs(dk))) << "dk, Hkv " << Hkv;
          EXPECT_NEAR(g[(H + Hkv + kv) * D + d], dv, 1e-5 * (1 + std::abs(dv))) << "dv, Hkv " << Hkv;
        }
    }
  }
}

}  // namespace
}  // namespace odyssey
