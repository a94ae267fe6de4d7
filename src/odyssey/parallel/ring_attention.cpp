#include "odyssey/parallel/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "odyssey/comm/p2p_tags.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/parallel/lse_merge.h"

namespace odyssey {
namespace {

// The mask of queries q against keys k by global positions; false when no key is visible.
bool pair_mask(const RingAttention::Segment& q, const RingAttention::Segment& k, AttentionMask* m) {
  const int64_t q_last = q.start + q.len - 1, k_last = k.start + k.len - 1;
  if (k.start > q_last) return false;
  if (k_last <= q.start)
    *m = {MaskKind::none, 0, 0};
  else
    *m = {MaskKind::causal, q.start, k.start};
  return true;
}

// Every chunk of at most `rows` query rows of `mine` against every segment of `theirs` it can see:
// f(ks, row, n, mask), rows [row, row + n) of this rank, the mask shifted to the chunk's first row.
template <class F>
void for_each_block(const std::vector<RingAttention::Segment>& mine,
                    const std::vector<RingAttention::Segment>& theirs, int rows, F&& f) {
  for (const RingAttention::Segment& qs : mine)
    for (const RingAttention::Segment& ks : theirs) {
      AttentionMask mask;
      if (!pair_mask(qs, ks, &mask)) continue;
      for (int p0 = 0; p0 < qs.len; p0 += rows) {
        AttentionMask m = mask;
        if (m.kind == MaskKind::causal) m.q_start += p0;
        f(ks, qs.offset + p0, std::min(rows, qs.len - p0), m);
      }
    }
}

// Rows [row, row + n) of a view.
HeadsView rows_of(HeadsView x, int64_t row) {
  return {x.data + row * x.row_stride, x.batch_stride, x.row_stride};
}
MutHeadsView rows_of(MutHeadsView x, int64_t row) {
  return {x.data + row * x.row_stride, x.batch_stride, x.row_stride};
}

// kv [B, T, 2, Hkv, D] <- k, v: one message per step.
void pack_kv(float* kv, HeadsView k, HeadsView v, int B, int T, int Hkv, int D) {
  const int64_t w = int64_t(Hkv) * D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      float* dst = kv + (int64_t(b) * T + t) * 2 * w;
      std::memcpy(dst, k.data + b * k.batch_stride + t * k.row_stride, size_t(w) * sizeof(float));
      std::memcpy(dst + w, v.data + b * v.batch_stride + t * v.row_stride, size_t(w) * sizeof(float));
    }
}

// dk, dv += dkv [B, T, 2, Hkv, D].
void add_kv(MutHeadsView dk, MutHeadsView dv, const float* dkv, int B, int T, int Hkv, int D) {
  const int64_t w = int64_t(Hkv) * D;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* src = dkv + (int64_t(b) * T + t) * 2 * w;
      float* k = dk.data + b * dk.batch_stride + t * dk.row_stride;
      float* v = dv.data + b * dv.batch_stride + t * dv.row_stride;
      for (int64_t i = 0; i < w; ++i) k[i] += src[i];
      for (int64_t i = 0; i < w; ++i) v[i] += src[w + i];
    }
}

// dk, dv := 0.
void zero_kv(MutHeadsView dk, MutHeadsView dv, int B, int T, int Hkv, int D) {
  const size_t w = size_t(Hkv) * D * sizeof(float);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      std::memset(dk.data + b * dk.batch_stride + t * dk.row_stride, 0, w);
      std::memset(dv.data + b * dv.batch_stride + t * dv.row_stride, 0, w);
    }
}

}  // namespace

RingAttention::RingAttention(Communicator& ring, RingOptions options, int n_kv_head)
    : ring_(ring), options_(options), n_kv_head_(n_kv_head) {
  ODY_CHECK(options_.progress_rows > 0, "ring attention: progress_rows must be positive");
  ODY_CHECK(n_kv_head >= 0, "ring attention: n_kv_head {} is negative", n_kv_head);
}

std::vector<RingAttention::Segment> RingAttention::segments(int rank, int Tl) const {
  return ring_runs(options_.layout, ring_.size(), rank, Tl);
}

void RingAttention::check_dims(const AttentionDims& d) const {
  ODY_CHECK(d.B > 0 && d.Tq > 0 && d.Tq == d.Tk, "ring attention: needs Tq = Tk > 0 (got B={}, Tq={}, Tk={})",
            d.B, d.Tq, d.Tk);
  ODY_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0, "ring attention: n_head {} is not a multiple of n_kv_head {}", d.H,
            d.Hkv);
  ODY_CHECK(
      options_.layout != RingLayout::zigzag || ring_.size() == 1 || d.Tq % 2 == 0,
      "zigzag ring attention over sp_ring={} needs an even number of local tokens (got {}): the sequence "
      "must be a multiple of 2*sp_ring",
      ring_.size(), d.Tq);
}

void RingAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                            AttentionSavedPtr& saved) {
  saved.reset();  // backward reads the layer's own qkv, out and lse
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  forward_heads(heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T), {B, T, T, H, f.Hkv, D});
}

void RingAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                             const float* qkv, int B, int T, int H, int D, const AttentionSaved* /*saved*/) {
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  const AttentionDims dims{B, T, T, H, f.Hkv, D};
  if (dqkv != qkv) {
    backward_heads(f.q(dqkv, T), f.k(dqkv, T), f.v(dqkv, T), heads_view(dout, T, H, D),
                   heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T), dims);
    return;
  }
  // In place: q is read at every step, so dq accumulates apart and goes over q at the end.
  const int64_t hd = int64_t(H) * D, rows = int64_t(B) * T;
  dq_.at_least(size_t(rows * hd));
  std::memset(dq_.data(), 0, size_t(rows * hd) * sizeof(float));
  backward_heads(heads_view(dq_.data(), T, H, D), f.k(dqkv, T), f.v(dqkv, T), heads_view(dout, T, H, D),
                 heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T), dims, true);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dqkv + i * f.width(), dq_.data() + i * hd, size_t(hd) * sizeof(float));
}

namespace {

// Completes a request (if any), counting the time as waiting.
void finish(RequestPtr& r, RingTimes& times) {
  if (!r) return;
  Timer t;
  r->wait();
  times.wait += t.seconds();
  r.reset();
}

}  // namespace

void RingAttention::pass_kv(int s, int64_t kv_n, RequestPtr& recv, RequestPtr& send) {
  const int P = ring_.size(), r = ring_.rank();
  if (s + 1 >= P) return;  // the last step's block goes nowhere
  // Receive first, then send; the caller computes on block s while both are in flight.
  if (options_.bf16_wire) {
    // Kept at their largest, like the float scratch (ring_scratch_bytes counts them).
    if (kv_send_.size() < size_t(kv_n)) kv_send_.resize(size_t(kv_n)), kv_recv_.resize(size_t(kv_n));
    convert_to_bf16(kv_[s % 2].data(), kv_send_.data(), size_t(kv_n));
    recv = ring_.recv_async(kv_recv_.data(), size_t(kv_n), DType::bf16, (r + P - 1) % P, p2p_tag::ring_kv);
    send = ring_.send_async(kv_send_.data(), size_t(kv_n), DType::bf16, (r + 1) % P, p2p_tag::ring_kv);
  } else {
    recv = ring_.recv_async(kv_[(s + 1) % 2].data(), size_t(kv_n), DType::f32, (r + P - 1) % P,
                            p2p_tag::ring_kv);
    send = ring_.send_async(kv_[s % 2].data(), size_t(kv_n), DType::f32, (r + 1) % P, p2p_tag::ring_kv);
  }
  if (!options_.overlap) finish(recv, times_), finish(send, times_);
}

void RingAttention::received_kv(int s, int64_t kv_n) {
  if (options_.bf16_wire && s + 1 < ring_.size())
    convert_to_float(kv_recv_.data(), kv_[(s + 1) % 2].data(), size_t(kv_n));
}

size_t RingAttention::bytes() const {
  size_t n = dkv_in_.bytes() + blk_out_.bytes() + blk_lse_.bytes() + lse_rows_.bytes() + dq_.bytes();
  for (int i = 0; i < 2; ++i) n += kv_[i].bytes() + dkv_[i].bytes();
  return n + (kv_send_.size() + kv_recv_.size()) * sizeof(bf16);
}

size_t ring_scratch_bytes(int P_, int progress_rows, int B, int Tl, int H, int Hkv, int D, bool bf16_wire) {
  const size_t P = size_t(P_), rows = size_t(std::min(progress_rows, Tl));
  const size_t kv_n = size_t(B) * Tl * 2 * Hkv * D, buffers = P > 1 ? 2 : 1;
  // kv_ and dkv_ (double-buffered on a ring), dkv_in_, a block's out and lse, a slice of the lse.
  const size_t floats =
      2 * buffers * kv_n + (P > 1 ? kv_n : 0) + size_t(B) * rows * H * D + 2 * size_t(B) * H * rows;
  // bf16_wire: the block sent and the one arriving, as bf16 (pass_kv; only when there is a next rank).
  const size_t wire = bf16_wire && P > 1 ? 2 * kv_n * dtype_size(DType::bf16) : 0;
  return floats * dtype_size(DType::f32) + wire;
}

size_t ring_bytes_for(int P, int progress_rows, int n_kv_head, int B, int T, int H, int D, bool bf16_wire) {
  // Scratch only (nothing saved per layer): the schedule's, and dq of the layers' in-place backward.
  return ring_scratch_bytes(P, progress_rows, B, T, H, n_kv_head ? n_kv_head : H, D, bf16_wire) +
         size_t(B) * T * H * D * dtype_size(DType::f32);
}

size_t RingAttention::bytes_for_heads(int B, int Tl, int H, int Hkv, int D) const {
  return ring_scratch_bytes(ring_.size(), options_.progress_rows, B, Tl, H, Hkv, D, options_.bf16_wire);
}

size_t RingAttention::bytes_for(int B, int T, int H, int D, int /*n_layer*/) const {
  return ring_bytes_for(ring_.size(), options_.progress_rows, n_kv_head_, B, T, H, D, options_.bf16_wire);
}

void RingAttention::forward_heads(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                                  AttentionDims d) {
  check_dims(d);
  const int P = ring_.size(), r = ring_.rank();
  const int B = d.B, Tl = d.Tq, H = d.H, Hkv = d.Hkv, D = d.D;
  const int rows = std::min(options_.progress_rows, Tl);
  const int64_t kvw = 2 * int64_t(Hkv) * D, kv_n = int64_t(B) * Tl * kvw;
  const float scale = 1.0f / std::sqrt(float(D));
  for (int i = 0; i < (P > 1 ? 2 : 1); ++i) kv_[i].at_least(size_t(kv_n));
  blk_out_.at_least(size_t(B) * rows * H * D);
  blk_lse_.at_least(size_t(B) * H * rows);
  pack_kv(kv_[0].data(), k, v, B, Tl, Hkv, D);
  // Every row starts having seen no key: out 0, lse -inf.
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tl; ++t)
      std::memset(out.data + b * out.batch_stride + t * out.row_stride, 0, size_t(H) * D * sizeof(float));
  std::fill(lse, lse + int64_t(B) * H * Tl, -std::numeric_limits<float>::infinity());

  const std::vector<Segment> mine = segments(r, Tl);
  for (int s = 0; s < P; ++s) {
    const int src = (r - s + P) % P;  // whose K, V this rank holds at step s
    const float* cur = kv_[s % 2].data();
    RequestPtr recv, send;
    pass_kv(s, kv_n, recv, send);
    Timer compute;
    for_each_block(mine, segments(src, Tl), rows, [&](const Segment& ks, int row, int n, AttentionMask m) {
      const HeadsView kb{cur + ks.offset * kvw, Tl * kvw, kvw}, vb{kb.data + int64_t(Hkv) * D, Tl * kvw, kvw};
      attention_forward(options_.bf16_wire, heads_view(blk_out_.data(), n, H, D), blk_lse_.data(),
                        rows_of(q, row), kb, vb, {B, n, ks.len, H, Hkv, D}, m, scale);
      merge_attention_block(rows_of(out, row), lse + row, Tl, as_const(heads_view(blk_out_.data(), n, H, D)),
                            blk_lse_.data(), B, n, H, D);
      if (recv) recv->test();
      if (send) send->test();
    });
    times_.compute += compute.seconds();
    finish(recv, times_);
    finish(send, times_);
    received_kv(s, kv_n);
    ++times_.steps;
  }
}

void RingAttention::backward_heads(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout,
                                   HeadsView out, const float* lse, HeadsView q, HeadsView k, HeadsView v,
                                   AttentionDims d, bool own_kv_over) {
  check_dims(d);
  const int P = ring_.size(), r = ring_.rank(), next = (r + 1) % P, prev = (r + P - 1) % P;
  const int B = d.B, Tl = d.Tq, H = d.H, Hkv = d.Hkv, D = d.D;
  const int rows = std::min(options_.progress_rows, Tl);
  const int64_t kvw = 2 * int64_t(Hkv) * D, kv_n = int64_t(B) * Tl * kvw;
  const float scale = 1.0f / std::sqrt(float(D));
  for (int i = 0; i < (P > 1 ? 2 : 1); ++i) {
    kv_[i].at_least(size_t(kv_n));
    dkv_[i].at_least(size_t(kv_n));
  }
  if (P > 1) dkv_in_.at_least(size_t(kv_n));
  lse_rows_.at_least(size_t(B) * H * rows);
  pack_kv(kv_[0].data(), k, v, B, Tl, Hkv, D);
  if (own_kv_over) zero_kv(dk, dv, B, Tl, Hkv, D);  // k, v are not read again

  const std::vector<Segment> mine = segments(r, Tl);
  RequestPtr dkv_recv, dkv_send[2];
  for (int s = 0; s < P; ++s) {
    const int src = (r - s + P) % P;
    const float* cur = kv_[s % 2].data();
    RequestPtr recv, send;
    pass_kv(s, kv_n, recv, send);
    // This step's contribution to block src's dK|dV, before the travelling accumulator is added.
    float* acc = dkv_[s % 2].data();
    finish(dkv_send[s % 2], times_);  // sent two steps ago: the buffer is free again
    std::memset(acc, 0, size_t(kv_n) * sizeof(float));
    auto poll = [&] {
      for (RequestPtr* p : {&recv, &send, &dkv_recv, &dkv_send[0], &dkv_send[1]})
        if (*p) (*p)->test();
    };
    Timer compute;
    for_each_block(mine, segments(src, Tl), rows, [&](const Segment& ks, int row, int n, AttentionMask m) {
      const HeadsView kb{cur + ks.offset * kvw, Tl * kvw, kvw}, vb{kb.data + int64_t(Hkv) * D, Tl * kvw, kvw};
      const MutHeadsView dkb{acc + ks.offset * kvw, Tl * kvw, kvw},
          dvb{dkb.data + int64_t(Hkv) * D, Tl * kvw, kvw};
      // The kernel wants lse [B, H, n]: these rows of the saved [B, H, Tl].
      for (int bh = 0; bh < B * H; ++bh)
        std::memcpy(lse_rows_.data() + int64_t(bh) * n, lse + int64_t(bh) * Tl + row,
                    size_t(n) * sizeof(float));
      attention_backward(options_.bf16_wire, rows_of(dq, row), dkb, dvb, rows_of(dout, row),
                         rows_of(out, row), lse_rows_.data(), rows_of(q, row), kb, vb,
                         {B, n, ks.len, H, Hkv, D}, m, scale);
      poll();
    });
    times_.compute += compute.seconds();
    finish(recv, times_);
    finish(send, times_);
    received_kv(s, kv_n);
    if (P > 1) {
      // Add the accumulator that arrived for block src and pass it on towards src.
      if (s > 0) {
        finish(dkv_recv, times_);  // (already complete without overlap)
        accumulate(acc, dkv_in_.data(), size_t(kv_n));
      }
      dkv_recv = ring_.recv_async(dkv_in_.data(), size_t(kv_n), DType::f32, prev, p2p_tag::ring_dkv);
      dkv_send[s % 2] = ring_.send_async(acc, size_t(kv_n), DType::f32, next, p2p_tag::ring_dkv);
      if (!options_.overlap) finish(dkv_recv, times_), finish(dkv_send[s % 2], times_);
    }
    ++times_.steps;
  }
  // After P hops the accumulator of this rank's own block is back.
  const float* own = dkv_[0].data();
  if (P > 1) {
    finish(dkv_recv, times_);
    own = dkv_in_.data();
  }
  add_kv(dk, dv, own, B, Tl, Hkv, D);
  finish(dkv_send[0], times_);
  finish(dkv_send[1], times_);
}

}  // namespace odyssey
