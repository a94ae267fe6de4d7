#include "odyssey/parallel/ulysses.h"

#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/model/fused_qkv.h"

namespace odyssey {
namespace {

void copy(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void add(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Moves rows between the all-to-all's rank blocks and the full sequence: block i of `blocks`
// ([U][B, T, w]) holds tokens [i T, (i+1) T) of `full` ([B, U T, w]).
void blocks_to_full(float* full, const float* blocks, int U, int B, int T, int64_t w) {
#pragma omp parallel for collapse(3) schedule(static)
  for (int i = 0; i < U; ++i)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        copy(full + (int64_t(b) * U * T + int64_t(i) * T + t) * w,
             blocks + ((int64_t(i) * B + b) * T + t) * w, w);
}
void full_to_blocks(float* blocks, const float* full, int U, int B, int T, int64_t w) {
#pragma omp parallel for collapse(3) schedule(static)
  for (int i = 0; i < U; ++i)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        copy(blocks + ((int64_t(i) * B + b) * T + t) * w,
             full + (int64_t(b) * U * T + int64_t(i) * T + t) * w, w);
}

}  // namespace

UlyssesHeads::UlyssesHeads(int H_, int Hkv_, int U_) : H(H_), Hkv(Hkv_), U(U_) {
  ODY_CHECK(Hkv > 0 && H % Hkv == 0, "n_head ({}) is not a multiple of n_kv_head ({})", H, Hkv);
  ODY_CHECK(
      H % U == 0,
      "Ulysses attention over parallel.sp_ulysses={} ranks needs n_head ({}) divisible by {} (each rank "
      "takes n_head/sp_ulysses heads); choose an sp_ulysses that divides {} and put the rest in sp_ring",
      U, H, U, H);
  ODY_CHECK(
      Hkv % U == 0 || U % Hkv == 0,
      "Ulysses attention over parallel.sp_ulysses={} ranks needs n_kv_head ({}) divisible by {}, or {} a "
      "multiple of n_kv_head (key/value heads are then replicated)",
      U, Hkv, U, U);
}

UlyssesAttention::UlyssesAttention(Communicator& ulysses, int n_kv_head, RingAttention* inner)
    : comm_(ulysses), n_kv_head_(n_kv_head), inner_(inner) {
  ODY_CHECK(n_kv_head >= 0, "Ulysses attention: n_kv_head {} is negative", n_kv_head);
}

size_t UlyssesAttention::bytes() const {
  return send_.bytes() + recv_.bytes() + dout_h_.bytes() + dqkv_h_.bytes() + (inner_ ? inner_->bytes() : 0);
}

size_t UlyssesAttention::bytes_for(int B, int T, int H, int D, int n_layer) const {
  const int U = comm_.size(), Hkv = n_kv_head_ ? n_kv_head_ : H;
  const UlyssesHeads heads(H, Hkv, U);
  const size_t Hl = size_t(heads.local_heads()), Hkvl = size_t(heads.local_kv_heads());
  const size_t qkv_h = size_t(U) * B * T * (Hl + 2 * Hkvl) * D, out_h = size_t(U) * B * T * Hl * D;
  // Saved per layer: head-sharded qkv and out. Scratch: send_, recv_, dqkv_h_ (qkv-sized), dout_h_.
  const size_t floats = size_t(n_layer) * (qkv_h + out_h) + 3 * qkv_h + out_h;
  return floats * sizeof(float) + (inner_ ? inner_->bytes_for_heads(B, U * T, int(Hl), int(Hkvl), D) : 0);
}

void UlyssesAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                               AttentionSavedPtr& saved) {
  const int U = comm_.size(), Hkv = n_kv_head_ ? n_kv_head_ : H;
  const UlyssesHeads heads(H, Hkv, U);
  const int Hl = heads.local_heads(), Hkvl = heads.local_kv_heads(), Tf = U * T;
  const FusedQkv in{H, Hkv, D}, loc{Hl, Hkvl, D};
  const int64_t W = loc.width(), qkv_block = int64_t(B) * T * W, out_w = int64_t(Hl) * D,
                out_block = int64_t(B) * T * out_w;
  send_.at_least(size_t(U * qkv_block));
  recv_.at_least(size_t(U * qkv_block));

  // Q, K, V of rank j's heads for my tokens, packed into block j: one all-to-all for all three.
#pragma omp parallel for collapse(3) schedule(static)
  for (int j = 0; j < U; ++j)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const float* row = qkv + (int64_t(b) * T + t) * in.width();
        float* dst = send_.data() + j * qkv_block + (int64_t(b) * T + t) * W;
        copy(dst, row + int64_t(heads.first_head(j)) * D, int64_t(Hl) * D);
        copy(dst + int64_t(Hl) * D, row + in.k_offset() + int64_t(heads.first_kv_head(j)) * D,
             int64_t(Hkvl) * D);
        copy(dst + int64_t(Hl + Hkvl) * D, row + in.v_offset() + int64_t(heads.first_kv_head(j)) * D,
             int64_t(Hkvl) * D);
      }
  comm_.all_to_all(send_.data(), recv_.data(), size_t(qkv_block), DType::f32);

  // What an earlier forward of this layer saved is reused (its backward is done).
  if (!dynamic_cast<Saved*>(saved.get())) saved = std::make_unique<Saved>();
  Saved& sv = static_cast<Saved&>(*saved);
  sv.B = B, sv.T = T, sv.H = H, sv.D = D;
  if (sv.qkv.size() != size_t(U * qkv_block)) sv.qkv.resize(size_t(U * qkv_block));
  if (sv.out.size() != size_t(U * out_block)) sv.out.resize(size_t(U * out_block));
  blocks_to_full(sv.qkv.data(), recv_.data(), U, B, T, W);

  const AttentionDims dims{B, Tf, Tf, Hl, Hkvl, D};
  const MutHeadsView out_h = heads_view(sv.out.data(), Tf, Hl, D);
  const float* qkv_h = sv.qkv.data();
  if (inner_)
    inner_->forward_heads(out_h, lse, loc.q(qkv_h, Tf), loc.k(qkv_h, Tf), loc.v(qkv_h, Tf), dims);
  else
    attention_forward(out_h, lse, loc.q(qkv_h, Tf), loc.k(qkv_h, Tf), loc.v(qkv_h, Tf), dims,
                      {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));

  // Rank i's tokens of my heads go back to rank i; block j of what comes back is rank j's heads.
  full_to_blocks(send_.data(), sv.out.data(), U, B, T, out_w);
  comm_.all_to_all(send_.data(), recv_.data(), size_t(out_block), DType::f32);
#pragma omp parallel for collapse(3) schedule(static)
  for (int j = 0; j < U; ++j)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        copy(out + (int64_t(b) * T + t) * H * D + int64_t(heads.first_head(j)) * D,
             recv_.data() + j * out_block + (int64_t(b) * T + t) * out_w, out_w);
}

void UlyssesAttention::backward(float* dqkv, const float* dout, const float* /*out*/, const float* lse,
                                const float* /*qkv: saved head-sharded*/, int B, int T, int H, int D,
                                const AttentionSaved* saved) {
  const int U = comm_.size(), Hkv = n_kv_head_ ? n_kv_head_ : H;
  const UlyssesHeads heads(H, Hkv, U);
  const int Hl = heads.local_heads(), Hkvl = heads.local_kv_heads(), Tf = U * T;
  const FusedQkv in{H, Hkv, D}, loc{Hl, Hkvl, D};
  const int64_t W = loc.width(), qkv_block = int64_t(B) * T * W, out_w = int64_t(Hl) * D,
                out_block = int64_t(B) * T * out_w;
  const Saved* found = dynamic_cast<const Saved*>(saved);
  ODY_CHECK(found && found->B == B && found->T == T && found->H == H && found->D == D,
            "Ulysses attention backward without the forward of this layer (B={}, T={}, H={}, D={})", B, T, H,
            D);
  const Saved& sv = *found;
  send_.at_least(size_t(U * qkv_block));
  recv_.at_least(size_t(U * qkv_block));
  dout_h_.at_least(size_t(U * out_block));
  dqkv_h_.at_least(size_t(U * qkv_block));

  // dout: sequence-sharded -> head-sharded, as q went.
#pragma omp parallel for collapse(3) schedule(static)
  for (int j = 0; j < U; ++j)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        copy(send_.data() + j * out_block + (int64_t(b) * T + t) * out_w,
             dout + (int64_t(b) * T + t) * H * D + int64_t(heads.first_head(j)) * D, out_w);
  comm_.all_to_all(send_.data(), recv_.data(), size_t(out_block), DType::f32);
  blocks_to_full(dout_h_.data(), recv_.data(), U, B, T, out_w);

  std::memset(dqkv_h_.data(), 0, size_t(U * qkv_block) * sizeof(float));
  const AttentionDims dims{B, Tf, Tf, Hl, Hkvl, D};
  const float* qkv_h = sv.qkv.data();
  float* dqkv_h = dqkv_h_.data();
  const HeadsView dout_v = as_const(heads_view(dout_h_.data(), Tf, Hl, D)),
                  out_v = heads_view(sv.out.data(), Tf, Hl, D);
  if (inner_)
    inner_->backward_heads(loc.q(dqkv_h, Tf), loc.k(dqkv_h, Tf), loc.v(dqkv_h, Tf), dout_v, out_v, lse,
                           loc.q(qkv_h, Tf), loc.k(qkv_h, Tf), loc.v(qkv_h, Tf), dims);
  else
    attention_backward(loc.q(dqkv_h, Tf), loc.k(dqkv_h, Tf), loc.v(dqkv_h, Tf), dout_v, out_v, lse,
                       loc.q(qkv_h, Tf), loc.k(qkv_h, Tf), loc.v(qkv_h, Tf), dims, {MaskKind::causal, 0, 0},
                       1.0f / std::sqrt(float(D)));

  // dq|dk|dv: head-sharded -> sequence-sharded, in one all-to-all.
  full_to_blocks(send_.data(), dqkv_h_.data(), U, B, T, W);
  comm_.all_to_all(send_.data(), recv_.data(), size_t(qkv_block), DType::f32);
  // Ranks in order within each row, so replicated KV heads are summed in a fixed order.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < U; ++j) {
        float* row = dqkv + (int64_t(b) * T + t) * in.width();
        const float* src = recv_.data() + j * qkv_block + (int64_t(b) * T + t) * W;
        add(row + int64_t(heads.first_head(j)) * D, src, int64_t(Hl) * D);
        add(row + in.k_offset() + int64_t(heads.first_kv_head(j)) * D, src + int64_t(Hl) * D,
            int64_t(Hkvl) * D);
        add(row + in.v_offset() + int64_t(heads.first_kv_head(j)) * D, src + int64_t(Hl + Hkvl) * D,
            int64_t(Hkvl) * D);
      }
}

}  // namespace odyssey
