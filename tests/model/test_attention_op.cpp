// LocalAttention over a GQA fused qkv [B, T, (H + 2 Hkv) D] computes what it computes over the
// same qkv with each key/value head repeated for its H / Hkv query heads (Hugging Face's repeat_kv):
// the same out and lse, the same dq, and dk, dv the sums of the repeated heads' gradients. Its query
// chunks against the K/V prefix (long-context-memory.md §4.3) give the whole call's bits for out, lse
// and dq, and its dk, dv within rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "odyssey/model/attention_op.h"
#include "odyssey/model/kv_prefix.h"
#include "odyssey/model/row_chunks.h"

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

// B sequences of T tokens in row chunks that straddle sequences and end short, run as a working layer
// does (each chunk's qkv on its own, K/V copied into the prefix buffer; backward last chunk first) and
// as a layer keeping its whole qkv does (the prefix read in place).
TEST(LocalAttention, QueryChunksAgainstTheKvPrefixEqualTheWholeCall) {
  const int B = 3, T = 29, N = B * T, H = 4, D = 8;
  for (int Hkv : {2, 4}) {
    const FusedQkv f{H, Hkv, D};
    const size_t W = size_t(f.width()), HD = size_t(H) * D;
    std::vector<float> qkv(size_t(N) * W), dout(size_t(N) * HD);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.37f * float(i)) * 0.8f;
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.11f * float(i));
    LocalAttention op(Hkv);
    const KvPrefixLayout layout = op.kv_prefix(H, D);
    std::vector<float> out(size_t(N) * HD), lse(size_t(N) * H), dqkv(qkv.size(), 0.0f);
    AttentionSavedPtr saved;
    op.forward(out.data(), lse.data(), qkv.data(), B, T, H, D, saved);
    op.backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, H, D, saved.get());
    for (int chunk : {16, 31, 40}) {
      for (bool whole_qkv : {false, true}) {
        const std::string what = "Hkv " + std::to_string(Hkv) + ", chunk " + std::to_string(chunk) +
                                 (whole_qkv ? ", whole qkv" : "");
        const RowChunks rc{N, chunk};
        FloatBuffer layer_qkv, kv;
        layer_qkv.resize(size_t(whole_qkv ? N : rc.chunk_rows()) * W);
        kv.resize(whole_qkv ? 0 : size_t(N) * 2 * Hkv * D);
        std::vector<float> c_out(out.size()), c_lse(lse.size()), c_dqkv(dqkv.size());
        auto load = [&](int j) {  // chunk j's qkv rows into the layer's buffer (the projection's output)
          float* dst = row_at(layer_qkv, rc.begin(j), N, W);
          std::copy(qkv.begin() + long(rc.begin(j) * W), qkv.begin() + long((rc.begin(j) + rc.size(j)) * W),
                    dst);
          store_kv(kv, dst, rc.begin(j), rc.size(j), op, layout, T, H, D);
          return dst;
        };
        for (int j = 0; j < rc.count(); ++j) {
          const float* q = load(j);
          op.forward_chunk(c_out.data() + size_t(rc.begin(j)) * HD, c_lse.data() + size_t(rc.begin(j)) * H, q,
                           kv_rows(layer_qkv, kv, N, f, layout), rc.begin(j), rc.size(j), T, H, D);
        }
        EXPECT_EQ(c_out, out) << what;
        // lse: each piece of a chunk within one sequence is [H, m] at H times its first row.
        for (int j = 0; j < rc.count(); ++j)
          for (int i = 0; i < rc.size(j);) {
            const int row = rc.begin(j) + i, b = row / T, t0 = row % T, m = std::min(rc.size(j) - i, T - t0);
            for (int h = 0; h < H; ++h)
              for (int t = 0; t < m; ++t)
                EXPECT_EQ(c_lse[size_t(row) * H + size_t(h) * m + t], lse[(size_t(b) * H + h) * T + t0 + t])
                    << what;
            i += m;
          }
        FloatBuffer dkv, dq_chunk;
        dkv.resize(size_t(N) * 2 * Hkv * D);
        dkv.zero();
        dq_chunk.resize(size_t(rc.chunk_rows()) * W);
        for (int j = rc.count() - 1; j >= 0; --j) {
          const int r = rc.begin(j), n = rc.size(j);
          const float* q = load(j);
          dq_chunk.zero();
          op.backward_chunk(dq_chunk.data(), layout.view(dkv.data()), dout.data() + size_t(r) * HD,
                            c_out.data() + size_t(r) * HD, c_lse.data() + size_t(r) * H, q,
                            kv_rows(layer_qkv, kv, N, f, layout), r, n, T, H, D);
          std::copy(dq_chunk.data(), dq_chunk.data() + size_t(n) * W, c_dqkv.begin() + long(size_t(r) * W));
        }
        for (size_t row = 0; row < size_t(N); ++row)
          for (size_t c = 0; c < W; ++c) {
            const float got = c_dqkv[row * W + c], want = dqkv[row * W + c];
            if (c < HD)
              ASSERT_EQ(got, want) << "dq, " << what;
            else
              ASSERT_NEAR(got, want, 1e-5 * (1 + std::abs(want))) << "dk, dv, " << what;
          }
      }
    }
  }
}

}  // namespace
}  // namespace odyssey
