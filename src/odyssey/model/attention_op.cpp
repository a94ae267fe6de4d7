#include "odyssey/model/attention_op.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/model/row_chunks.h"

namespace odyssey {

KvPrefixLayout AttentionSizing::kv_prefix(int, int) const {
  ODY_CHECK(false, "this attention op does not run query chunks");
  return {};
}

void AttentionOp::store_kv(MutKvRows, const float*, int, int, int, int, int) {
  ODY_CHECK(false, "this attention op does not run query chunks");
}

void AttentionOp::forward_chunk(float*, float*, const float*, KvRows, int, int, int, int, int) {
  ODY_CHECK(false, "this attention op does not run query chunks");
}

void AttentionOp::backward_chunk(float*, MutKvRows, const float*, const float*, const float*, const float*,
                                 KvRows, int, int, int, int, int) {
  ODY_CHECK(false, "this attention op does not run query chunks");
}

LocalAttention::LocalAttention(int n_kv_head) : n_kv_head_(n_kv_head) {}

void LocalAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                             AttentionSavedPtr& saved) {
  saved.reset();  // out, lse and the layer's qkv are all backward needs
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  attention_forward(bf16_, heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T),
                    {B, T, T, H, f.Hkv, D}, {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));
}

void LocalAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                              const float* qkv, int B, int T, int H, int D, const AttentionSaved* /*saved*/) {
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  attention_backward(bf16_, f.q(dqkv, T), f.k(dqkv, T), f.v(dqkv, T), heads_view(dout, T, H, D),
                     heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T),
                     {B, T, T, H, f.Hkv, D}, {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));
}

KvPrefixLayout LocalAttention::kv_prefix(int H, int D) const {
  return {2 * int64_t(n_kv_head_ ? n_kv_head_ : H) * D, 1, true};
}

// Rows [r, r + n) of the prefix are the chunk's own k and v.
void LocalAttention::store_kv(MutKvRows kv, const float* qkv, int r, int n, int /*T*/, int H, int D) {
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  const int64_t w = int64_t(f.Hkv) * D;
  for (int i = 0; i < n; ++i) {
    const float* row = qkv + i * f.width();
    std::copy(row + f.k_offset(), row + f.k_offset() + w, kv.k + (int64_t(r) + i) * kv.row_stride);
    std::copy(row + f.v_offset(), row + f.v_offset() + w, kv.v + (int64_t(r) + i) * kv.row_stride);
  }
}

// Each piece: its m queries at positions [t0, t0 + m) against keys [0, t0 + m) of its sequence, as one
// sequence (B = 1) of the kernel.
void LocalAttention::forward_chunk(float* out, float* lse, const float* qkv, KvRows kv, int r, int n, int T,
                                   int H, int D) {
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  const int64_t HD = int64_t(H) * D, s = kv.row_stride;
  for_each_piece(r, n, T, [&](int b, int t0, int m, int i) {
    const int64_t k0 = int64_t(b) * T * s;
    attention_forward(bf16_, {out + i * HD, 0, HD}, lse + int64_t(i) * H, {qkv + i * f.width(), 0, f.width()},
                      {kv.k + k0, 0, s}, {kv.v + k0, 0, s}, {1, m, t0 + m, H, f.Hkv, D},
                      {MaskKind::causal, t0, 0}, 1.0f / std::sqrt(float(D)));
  });
}

void LocalAttention::backward_chunk(float* dqkv, MutKvRows dkv, const float* dout, const float* out,
                                    const float* lse, const float* qkv, KvRows kv, int r, int n, int T, int H,
                                    int D) {
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  const int64_t HD = int64_t(H) * D, s = kv.row_stride, ds = dkv.row_stride;
  for_each_piece(r, n, T, [&](int b, int t0, int m, int i) {
    const int64_t k0 = int64_t(b) * T * s, dk0 = int64_t(b) * T * ds;
    attention_backward(bf16_, {dqkv + i * f.width(), 0, f.width()}, {dkv.k + dk0, 0, ds},
                       {dkv.v + dk0, 0, ds}, {dout + i * HD, 0, HD}, {out + i * HD, 0, HD},
                       lse + int64_t(i) * H, {qkv + i * f.width(), 0, f.width()}, {kv.k + k0, 0, s},
                       {kv.v + k0, 0, s}, {1, m, t0 + m, H, f.Hkv, D}, {MaskKind::causal, t0, 0},
                       1.0f / std::sqrt(float(D)));
  });
  // The chunk's rows of dK and dV are complete.
  const int64_t w = int64_t(f.Hkv) * D;
  for (int i = 0; i < n; ++i) {
    float* row = dqkv + i * f.width();
    const float* dk = dkv.k + (int64_t(r) + i) * ds;
    const float* dv = dkv.v + (int64_t(r) + i) * ds;
    for (int64_t e = 0; e < w; ++e) row[f.k_offset() + e] += dk[e], row[f.v_offset() + e] += dv[e];
  }
}

}  // namespace odyssey
