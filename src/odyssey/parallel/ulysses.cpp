#include "odyssey/parallel/ulysses.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/model/row_chunks.h"

namespace odyssey {
namespace {

void copy(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, size_t(n) * sizeof(float));
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

UlyssesAttention::UlyssesAttention(Communicator& ulysses, int n_kv_head, RingAttention* inner, int deal_chunk,
                                   bool bf16_wire)
    : comm_(ulysses), n_kv_head_(n_kv_head), inner_(inner), deal_chunk_(deal_chunk), bf16_wire_(bf16_wire) {
  ODY_CHECK(n_kv_head >= 0, "Ulysses attention: n_kv_head {} is negative", n_kv_head);
  ODY_CHECK(deal_chunk >= 0, "Ulysses attention: deal_chunk {} is negative", deal_chunk);
}

void UlyssesAttention::exchange(const float* send, float* recv, size_t count) {
  if (!bf16_wire_) return comm_.all_to_all(send, recv, count, DType::f32);
  const size_t n = count * size_t(comm_.size());
  if (wire_send_.size() < n) wire_send_.resize(n), wire_recv_.resize(n);
  convert_to_bf16(send, wire_send_.data(), n);
  comm_.all_to_all(wire_send_.data(), wire_recv_.data(), count, DType::bf16);
  convert_to_float(wire_recv_.data(), recv, n);
}

size_t UlyssesAttention::bytes() const {
  return send_.bytes() + recv_.bytes() + dout_h_.bytes() + dqkv_h_.bytes() +
         (wire_send_.size() + wire_recv_.size()) * sizeof(bf16) + (inner_ ? inner_->bytes() : 0);
}

size_t ulysses_bytes_for(int U, int n_kv_head, int ring_ranks, int progress_rows, int B, int T, int H, int D,
                         int n_layer, bool bf16_wire) {
  const UlyssesHeads heads(H, n_kv_head ? n_kv_head : H, U);
  const size_t Hl = size_t(heads.local_heads()), Hkvl = size_t(heads.local_kv_heads());
  const size_t qkv_h = size_t(U) * B * T * (Hl + 2 * Hkvl) * D, out_h = size_t(U) * B * T * Hl * D;
  // Saved per layer: head-sharded qkv and out. Scratch: send_, recv_, dqkv_h_ (qkv-sized), dout_h_.
  const size_t floats = size_t(n_layer) * (qkv_h + out_h) + 3 * qkv_h + out_h;
  // bf16_wire: the largest message (the qkv's, out_h <= qkv_h) sent and received as bf16.
  const size_t wire = bf16_wire ? 2 * qkv_h * dtype_size(DType::bf16) : 0;
  return floats * dtype_size(DType::f32) + wire +
         (ring_ranks > 0
              ? ring_scratch_bytes(ring_ranks, progress_rows, B, U * T, int(Hl), int(Hkvl), D, bf16_wire)
              : 0);
}

size_t ulysses_chunk_bytes_for(int U, int n_kv_head, int rows, int H, int D, bool bf16_wire) {
  const UlyssesHeads heads(H, n_kv_head ? n_kv_head : H, U);
  const size_t Hl = size_t(heads.local_heads()), Hkvl = size_t(heads.local_kv_heads()),
               m = size_t(U) * size_t(rows) * D;
  // send_ and recv_: a chunk's q | out | dout (or dq | dk | dv, or k | v) for every rank; dout_h_: the
  // segment's out (forward) or dq (backward).
  // bf16_wire: the largest message as bf16, sent and received.
  const size_t message = m * std::max(3 * Hl, Hl + 2 * Hkvl);
  return (2 * message + m * Hl) * dtype_size(DType::f32) +
         (bf16_wire ? 2 * message * dtype_size(DType::bf16) : 0);
}

KvPrefixLayout ulysses_kv_prefix(int U, int n_kv_head, int H, int D) {
  const UlyssesHeads heads(H, n_kv_head ? n_kv_head : H, U);
  return {2 * int64_t(heads.local_kv_heads()) * D, U, false};
}

size_t UlyssesAttention::bytes_for(int B, int T, int H, int D, int n_layer) const {
  return ulysses_bytes_for(comm_.size(), n_kv_head_, inner_ ? inner_->comm().size() : 0,
                           inner_ ? inner_->options().progress_rows : 0, B, T, H, D, n_layer, bf16_wire_);
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
  exchange(send_.data(), recv_.data(), size_t(qkv_block));

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
    attention_forward(bf16_wire_, out_h, lse, loc.q(qkv_h, Tf), loc.k(qkv_h, Tf), loc.v(qkv_h, Tf), dims,
                      {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));

  // Rank i's tokens of my heads go back to rank i; block j of what comes back is rank j's heads.
  full_to_blocks(send_.data(), sv.out.data(), U, B, T, out_w);
  exchange(send_.data(), recv_.data(), size_t(out_block));
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
  exchange(send_.data(), recv_.data(), size_t(out_block));
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
    attention_backward(bf16_wire_, loc.q(dqkv_h, Tf), loc.k(dqkv_h, Tf), loc.v(dqkv_h, Tf), dout_v, out_v,
                       lse, loc.q(qkv_h, Tf), loc.k(qkv_h, Tf), loc.v(qkv_h, Tf), dims,
                       {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));

  // dq|dk|dv: head-sharded -> sequence-sharded, in one all-to-all.
  full_to_blocks(send_.data(), dqkv_h_.data(), U, B, T, W);
  exchange(send_.data(), recv_.data(), size_t(qkv_block));
  // Ranks in order within each row, so replicated KV heads are summed in a fixed order.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < U; ++j) {
        float* row = dqkv + (int64_t(b) * T + t) * in.width();
        const float* src = recv_.data() + j * qkv_block + (int64_t(b) * T + t) * W;
        accumulate(row + int64_t(heads.first_head(j)) * D, src, size_t(Hl) * D);
        accumulate(row + in.k_offset() + int64_t(heads.first_kv_head(j)) * D, src + int64_t(Hl) * D,
                   size_t(Hkvl) * D);
        accumulate(row + in.v_offset() + int64_t(heads.first_kv_head(j)) * D, src + int64_t(Hl + Hkvl) * D,
                   size_t(Hkvl) * D);
      }
}

}  // namespace odyssey

namespace odyssey {

// --- query chunks (long-context-memory.md §4.8) ----------------------------------------------------

KvPrefixLayout UlyssesAttention::kv_prefix(int H, int D) const {
  return ulysses_kv_prefix(comm_.size(), n_kv_head_, H, D);
}

size_t UlyssesAttention::chunk_bytes_for(int rows, int H, int D) const {
  return ulysses_chunk_bytes_for(comm_.size(), n_kv_head_, rows, H, D, bf16_wire_);
}

// The local chunk k of every rank (m rows) is the segment [U k c, U (k c + m)) only when the tokens
// were dealt by the layer's chunks c (an effective chunk of T or more: the contiguous split).
void UlyssesAttention::check_dealt(int r, int n, int T) const {
  const int c = deal_chunk_ > 0 && deal_chunk_ < T ? deal_chunk_ : T, t0 = r % T;
  ODY_CHECK(t0 % c == 0 && n == std::min(c, T - t0),
            "Ulysses query chunk of rows [{}, {}) of sequences of {} tokens, but the tokens were dealt by "
            "chunks of {} (memory.chunk_tokens and the sequence shard disagree)",
            r, r + n, T, deal_chunk_);
}

// The segment's k and v go to their heads' ranks and into the prefix rows of its tokens.
void UlyssesAttention::store_kv(MutKvRows kv, const float* qkv, int r, int n, int T, int H, int D) {
  check_dealt(r, n, T);
  const int U = comm_.size();
  const UlyssesHeads heads(H, n_kv_head_ ? n_kv_head_ : H, U);
  const FusedQkv in{H, heads.Hkv, D};
  const int64_t w = int64_t(heads.local_kv_heads()) * D;
  for_each_piece(r, n, T, [&](int b, int t0, int m, int i) {
    const int64_t block = int64_t(m) * 2 * w;
    send_.at_least(size_t(U * block));
    recv_.at_least(size_t(U * block));
#pragma omp parallel for collapse(2) schedule(static)
    for (int q = 0; q < U; ++q)
      for (int t = 0; t < m; ++t) {
        const float* row = qkv + (int64_t(i) + t) * in.width();
        float* dst = send_.data() + q * block + int64_t(t) * 2 * w;
        copy(dst, row + in.k_offset() + int64_t(heads.first_kv_head(q)) * D, w);
        copy(dst + w, row + in.v_offset() + int64_t(heads.first_kv_head(q)) * D, w);
      }
    exchange(send_.data(), recv_.data(), size_t(block));
    // Block q holds rank q's m tokens: global rows U t0 + q m + [0, m) of sequence b.
    const int64_t first = int64_t(b) * U * T + int64_t(U) * t0;
#pragma omp parallel for schedule(static)
    for (int e = 0; e < U * m; ++e) {
      const float* src = recv_.data() + int64_t(e) * 2 * w;
      copy(kv.k + (first + e) * kv.row_stride, src, w);
      copy(kv.v + (first + e) * kv.row_stride, src + w, w);
    }
  });
}

void UlyssesAttention::forward_chunk(float* out, float* lse, const float* qkv, KvRows kv, int r, int n, int T,
                                     int H, int D) {
  check_dealt(r, n, T);
  const int U = comm_.size();
  const UlyssesHeads heads(H, n_kv_head_ ? n_kv_head_ : H, U);
  const FusedQkv in{H, heads.Hkv, D};
  const int Hl = heads.local_heads(), Hkvl = heads.local_kv_heads();
  const int64_t hw = int64_t(Hl) * D, s = kv.row_stride;
  for_each_piece(r, n, T, [&](int b, int t0, int m, int i) {
    const int64_t block = int64_t(m) * hw;
    send_.at_least(size_t(U * block));
    recv_.at_least(size_t(U * block));
    dout_h_.at_least(size_t(U * block));
#pragma omp parallel for collapse(2) schedule(static)
    for (int q = 0; q < U; ++q)
      for (int t = 0; t < m; ++t)
        copy(send_.data() + q * block + int64_t(t) * hw,
             qkv + (int64_t(i) + t) * in.width() + int64_t(heads.first_head(q)) * D, hw);
    exchange(send_.data(), recv_.data(), size_t(block));
    // The segment's U m queries of my heads, in order, against the prefix of its sequence.
    const int64_t k0 = int64_t(b) * U * T * s;
    const int q0 = U * t0, mq = U * m;
    attention_forward(bf16_wire_, {dout_h_.data(), 0, hw}, lse + int64_t(i) * H, {recv_.data(), 0, hw},
                      {kv.k + k0, 0, s}, {kv.v + k0, 0, s}, {1, mq, q0 + mq, Hl, Hkvl, D},
                      {MaskKind::causal, q0, 0}, 1.0f / std::sqrt(float(D)));
    // Rows [q m, (q + 1) m) of the segment are rank q's tokens: out goes back as it lies.
    exchange(dout_h_.data(), recv_.data(), size_t(block));
#pragma omp parallel for collapse(2) schedule(static)
    for (int q = 0; q < U; ++q)
      for (int t = 0; t < m; ++t)
        copy(out + (int64_t(i) + t) * H * D + int64_t(heads.first_head(q)) * D,
             recv_.data() + q * block + int64_t(t) * hw, hw);
  });
}

void UlyssesAttention::backward_chunk(float* dqkv, MutKvRows dkv, const float* dout, const float* out,
                                      const float* lse, const float* qkv, KvRows kv, int r, int n, int T,
                                      int H, int D) {
  check_dealt(r, n, T);
  const int U = comm_.size();
  const UlyssesHeads heads(H, n_kv_head_ ? n_kv_head_ : H, U);
  const FusedQkv in{H, heads.Hkv, D}, loc{heads.local_heads(), heads.local_kv_heads(), D};
  const int Hl = heads.local_heads(), Hkvl = heads.local_kv_heads();
  const int64_t hw = int64_t(Hl) * D, kw = int64_t(Hkvl) * D, s = kv.row_stride, ds = dkv.row_stride;
  for_each_piece(r, n, T, [&](int b, int t0, int m, int i) {
    // In: q | out | dout of my heads for the segment's tokens, 3 hw per row.
    const int64_t in_block = int64_t(m) * 3 * hw, back_block = int64_t(m) * loc.width();
    send_.at_least(size_t(U * std::max(in_block, back_block)));
    recv_.at_least(size_t(U * std::max(in_block, back_block)));
    dout_h_.at_least(size_t(U) * m * hw);
#pragma omp parallel for collapse(2) schedule(static)
    for (int q = 0; q < U; ++q)
      for (int t = 0; t < m; ++t) {
        const int64_t row = int64_t(i) + t, h0 = int64_t(heads.first_head(q)) * D;
        float* dst = send_.data() + q * in_block + int64_t(t) * 3 * hw;
        copy(dst, qkv + row * in.width() + h0, hw);
        copy(dst + hw, out + row * H * D + h0, hw);
        copy(dst + 2 * hw, dout + row * H * D + h0, hw);
      }
    exchange(send_.data(), recv_.data(), size_t(in_block));
    const int64_t first = int64_t(b) * U * T, k0 = first * s, dk0 = first * ds;
    const int q0 = U * t0, mq = U * m;
    float* dq = dout_h_.data();
    std::memset(dq, 0, size_t(mq) * size_t(hw) * sizeof(float));
    const float* seg = recv_.data();
    attention_backward(bf16_wire_, {dq, 0, hw}, {dkv.k + dk0, 0, ds}, {dkv.v + dk0, 0, ds},
                       {seg + 2 * hw, 0, 3 * hw}, {seg + hw, 0, 3 * hw}, lse + int64_t(i) * H,
                       {seg, 0, 3 * hw}, {kv.k + k0, 0, s}, {kv.v + k0, 0, s}, {1, mq, q0 + mq, Hl, Hkvl, D},
                       {MaskKind::causal, q0, 0}, 1.0f / std::sqrt(float(D)));
    // Back: dq | dk | dv of the segment (its dK, dV complete: later segments have run), block q the
    // rows of rank q's tokens.
#pragma omp parallel for schedule(static)
    for (int e = 0; e < mq; ++e) {
      float* dst = send_.data() + int64_t(e) * loc.width();
      copy(dst, dq + int64_t(e) * hw, hw);
      copy(dst + hw, dkv.k + (first + q0 + e) * ds, kw);
      copy(dst + hw + kw, dkv.v + (first + q0 + e) * ds, kw);
    }
    exchange(send_.data(), recv_.data(), size_t(back_block));
    // Ranks in order within each row, so replicated KV heads are summed in a fixed order.
#pragma omp parallel for schedule(static)
    for (int t = 0; t < m; ++t)
      for (int q = 0; q < U; ++q) {
        float* row = dqkv + (int64_t(i) + t) * in.width();
        const float* src = recv_.data() + q * back_block + int64_t(t) * loc.width();
        accumulate(row + int64_t(heads.first_head(q)) * D, src, size_t(hw));
        accumulate(row + in.k_offset() + int64_t(heads.first_kv_head(q)) * D, src + hw, size_t(kw));
        accumulate(row + in.v_offset() + int64_t(heads.first_kv_head(q)) * D, src + hw + kw, size_t(kw));
      }
  });
}

}  // namespace odyssey
