#include "odyssey/model/block_runner.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/rope.h"
#include "odyssey/model/domino.h"
#include "odyssey/model/kv_prefix.h"

namespace odyssey {

// --- the buffers ---------------------------------------------------------------------------------

namespace {

// The one place a layer's buffer sizes are written: calls f(&BlockActs::buffer, floats) for each buffer
// allocate(spec, d, B, T, keep_qkv, rows, tp) holds (allocate fits them, bytes_for sums them). Every
// buffer is visited at every shape (0 floats when it holds none), so bytes() walks this list for what is
// held.
//
// Under tensor parallelism a layer holds Rn = rows(N) residual-stream rows (all N, or the TP-SP slice)
// and, for the projections' outputs, G = N / Rn token rows per residual row: the stored and cheap groups
// count residual rows, their wide buffers (up, act) G times as many token rows of this rank's features;
// the sequence-wide ones hold its heads of all N tokens.
// Attention: qkv [Q, (H + 2 Hkv) D] (and kv [N, K]), atty [A, H D], lse [A H]; output residual3 [Rn, C].
// Stored (S rows): residual2 [S, C], the norms' statistics [S] (mean: LayerNorm only), up [S G, up].
// Cheap (R rows): norm1, norm2 [R, C], act [R G, act].
//
// Dtypes: every buffer is fp32, but the tensors the bf16 policy rounds (norm1, qkv, atty, norm2, up,
// act) that the layer holds in 2 bytes (bf16: all, or the attention output) are listed in their *_h
// buffer and their fp32 one with 0 elements (the K/V prefix, the norms' statistics, lse and the residual
// stream stay fp32). Sizes are elements; bytes follow the type.
template <typename F>
void for_each_layer_buffer(bool mean, const BlockDims& d, int B, int T, bool keep_qkv, const LayerRows& rows,
                           const TpSplit& tp, Bf16Held bf16, F&& f) {
  using L = BlockActs;
  const size_t N = size_t(B) * T, C = size_t(d.C), Rn = size_t(tp.rows(int64_t(N))), G = N / Rn;
  const LayerRows::Counts n = rows.counts(N, Rn);
  const size_t S = n.stored, R = n.cheap, Q = n.qkv, A = n.attention,
               K = n.kv;  // K: the K/V prefix's floats per row
  const size_t M = mean ? S : 0;
  // A tensor the policy rounds: in fp32, or in its 2-byte buffer when held so.
  auto rounded = [&](auto fp32, auto half, size_t elements) {
    const bool h = bf16 == Bf16Held::all || (bf16 == Bf16Held::attention && half == &L::atty_h);
    f(fp32, h ? 0 : elements), f(half, h ? elements : 0);
  };
  rounded(&L::norm1, &L::norm1_h, R * C), f(&L::norm1_mean, M), f(&L::norm1_rstd, S);
  rounded(&L::qkv, &L::qkv_h, keep_qkv ? Q * size_t(d.qkv_width()) : 0);
  f(&L::kv, keep_qkv ? N * K : 0);
  rounded(&L::atty, &L::atty_h, A * size_t(d.attention_width())), f(&L::lse, A * size_t(d.H));
  f(&L::residual2, S * C);
  rounded(&L::norm2, &L::norm2_h, R * C), f(&L::norm2_mean, M), f(&L::norm2_rstd, S);
  rounded(&L::up, &L::up_h, S * G * size_t(d.up)), rounded(&L::act, &L::act_h, R * G * size_t(d.act));
  f(&L::residual3, rows.output ? Rn * C : 0);
}

// The bf16 tensors of a layer beside the fp32 buffers a call computes them in: f(fp32 buffer of the
// layer, its 2-byte buffer, the BlockWide buffer lent for the call) for each.
// The one list of them, as members: f(&BlockActs::fp32, &BlockActs::half, &BlockWide::lent).
template <typename F>
void for_each_rounded_member(F&& f) {
  using A = BlockActs;
  using W = BlockWide;
  f(&A::norm1, &A::norm1_h, &W::norm1), f(&A::qkv, &A::qkv_h, &W::qkv), f(&A::atty, &A::atty_h, &W::atty);
  f(&A::norm2, &A::norm2_h, &W::norm2), f(&A::up, &A::up_h, &W::up), f(&A::act, &A::act_h, &W::act);
}
template <typename Acts, typename Wide, typename F>
void for_each_rounded(Acts& a, Wide& w, F&& f) {
  for_each_rounded_member([&](auto fp32, auto half, auto lent) { f(a.*fp32, a.*half, w.*lent); });
}

// The one place the scratch's sizes are written: calls f(&BlockScratch::buffer, floats) for each buffer
// allocate(d, B, T, shared_qkv, backward, chunk, tp, q) holds; every buffer at every shape (0 floats when
// it holds none), so bytes() walks this list for what is held.
//
// With query chunks, datty and dqkv hold one chunk (A = R rows) and dkv the dK, dV of every row in the
// op's prefix layout (at least C wide: it carries the head's gradient). Key-outer (ring, hybrid): no
// dqkv, the op's backward writes the gradient over the layer's qkv.
template <typename F>
void for_each_scratch_buffer(const BlockDims& d, int B, int T, bool shared_qkv, bool backward, int chunk,
                             const TpSplit& tp, const QueryChunks& q, F&& f) {
  using S = BlockScratch;
  const size_t N = size_t(B) * T, C = size_t(d.C), b = backward ? 1 : 0, W = size_t(d.qkv_width()),
               HD = size_t(d.attention_width());
  const size_t Rn = size_t(tp.rows(int64_t(N))), G = N / Rn,
               R = size_t(q.rows(int(Rn), chunk, T).chunk_rows());
  const bool qc = q.on;
  const size_t A = qc ? R : N;
  f(&S::qkv, shared_qkv ? N * W : 0);
  // datty also carries the stage's d(final norm output) [Rn, C] from the LM head unless it holds one
  // chunk: then dkv carries it.
  f(&S::datty, b * (qc ? A * HD : std::max(N * HD, Rn * C)));
  f(&S::dqkv, q.key_outer ? 0 : b * A * W);
  f(&S::dkv, qc ? b * N * std::max(size_t(q.kv.width()), C) : 0);
  f(&S::dnorm, b * R * C * size_t(tp.slots())), f(&S::dact, b * R * G * size_t(d.act)),
      f(&S::dup, b * R * G * size_t(d.up));
}

}  // namespace

void BlockActs::allocate(const BlockSpec& spec, const BlockDims& d, int B, int T, bool keep_qkv,
                         const LayerRows& rows, const TpSplit& tp, Bf16Held bf16) {
  fit_listed(*this,
             [&](auto f) { for_each_layer_buffer(spec.norm.bias, d, B, T, keep_qkv, rows, tp, bf16, f); });
  attention.reset();  // saved for another shape
}

// What the buffers hold now (the list at any shape: it visits every buffer at every one), and what the
// attention op saved for backward (sized by the op, not in the list).
size_t BlockActs::bytes() const {
  return held_bytes(*this,
                    [](auto f) { for_each_layer_buffer(true, {}, 1, 1, true, {}, {}, Bf16Held::none, f); }) +
         (attention ? attention->bytes() : 0);
}

size_t BlockActs::bytes_for(const BlockSpec& spec, const BlockDims& d, int B, int T, bool keep_qkv,
                            const LayerRows& rows, const TpSplit& tp, Bf16Held bf16) {
  return listed_bytes(
      [&](auto f) { for_each_layer_buffer(spec.norm.bias, d, B, T, keep_qkv, rows, tp, bf16, f); });
}

void BlockActs::swap_cheap(BlockActs& o) {
  std::swap(norm1, o.norm1), std::swap(norm1_h, o.norm1_h);
  std::swap(norm2, o.norm2), std::swap(norm2_h, o.norm2_h);
  std::swap(act, o.act), std::swap(act_h, o.act_h);
}

void BlockActs::swap_attention(BlockActs& o) {
  std::swap(atty, o.atty), std::swap(atty_h, o.atty_h);
  std::swap(lse, o.lse);
  std::swap(attention, o.attention);
}

void BlockWide::fit(const BlockActs& a, const BlockActs& b) {
  for_each_rounded_member(
      [&](auto, auto half, auto lent) { (this->*lent).fit(std::max((a.*half).size(), (b.*half).size())); });
}

size_t BlockWide::bytes() const {
  size_t bytes = 0;
  for_each_rounded_member([&](auto, auto, auto lent) { bytes += (this->*lent).bytes(); });
  return bytes;
}

// Per bf16 buffer the larger of the two layers' elements, in fp32.
size_t BlockWide::bytes_for(const BlockSpec& spec, const BlockDims& d, int B, int T, bool keep_qkv,
                            const LayerRows& rows_a, Bf16Held held_a, const LayerRows& rows_b,
                            Bf16Held held_b, const TpSplit& tp) {
  std::vector<size_t> na, nb;  // the bf16 buffers' elements, in the list's order
  auto sizes = [&](const LayerRows& rows, Bf16Held held, std::vector<size_t>& out) {
    for_each_layer_buffer(spec.norm.bias, d, B, T, keep_qkv, rows, tp, held, [&](auto m, size_t n) {
      if constexpr (std::is_same_v<decltype(m), Bf16Buffer BlockActs::*>) out.push_back(n);
    });
  };
  sizes(rows_a, held_a, na), sizes(rows_b, held_b, nb);
  size_t bytes = 0;
  for (size_t i = 0; i < na.size(); ++i) bytes += std::max(na[i], nb[i]) * sizeof(float);
  return bytes;
}

void BlockScratch::allocate(const BlockDims& d, int B, int T, bool shared_qkv, bool backward, int chunk,
                            const TpSplit& tp, const QueryChunks& q) {
  fit_listed(*this, [&](auto f) { for_each_scratch_buffer(d, B, T, shared_qkv, backward, chunk, tp, q, f); });
}

size_t BlockScratch::bytes() const {
  return held_bytes(*this, [](auto f) { for_each_scratch_buffer({}, 1, 1, true, true, 0, {}, {}, f); }) +
         wide.bytes();
}

size_t BlockScratch::bytes_for(const BlockDims& d, int B, int T, bool shared_qkv, bool backward, int chunk,
                               const TpSplit& tp, const QueryChunks& q) {
  return listed_bytes(
      [&](auto f) { for_each_scratch_buffer(d, B, T, shared_qkv, backward, chunk, tp, q, f); });
}

BlockTensors resolve_block(const BlockParamInfos& l, const std::function<float*(const ParamInfo&)>& at) {
  auto r = [&](const ParamInfo* t) { return t ? at(*t) : nullptr; };
  return {r(l.norm1_w), r(l.norm1_b), r(l.qkv_w), r(l.qkv_b), r(l.proj_w), r(l.proj_b),
          r(l.norm2_w), r(l.norm2_b), r(l.up_w),  r(l.up_b),  r(l.down_w), r(l.down_b)};
}

// --- the runner ----------------------------------------------------------------------------------

namespace {

// One block call on this rank: the residual stream's R rows in chunks (rc), G token rows of the
// projections per residual row (tp under TP-SP, else 1), the collectives in flight at once (slots: 2
// under Domino, model/domino.h, else 1), and the call's seams.
class Runner {
 public:
  Runner(const BlockCall& call)
      : spec_(call.spec),
        s_(call.shape),
        d_(call.shape.d),
        att_(call.attention),
        lin_(call.linears),
        sc_(call.scratch),
        rope_(call.rope),
        o_(call.observer),
        rc_{s_.query_chunks.rows(int(lin_.rows(s_.N())), s_.chunk, s_.T)},
        G_(s_.N() / rc_.N),
        slots_(lin_.split().slots()) {}

  void forward(BlockActs& a, const float* x, const BlockTensors& w);
  void backward(float* dres, BlockActs& a, const float* x, const BlockTensors& w, const BlockTensors& g,
                const Recompute& re);

 private:
  bool interleave() const { return slots_ > 1; }
  int slot(int j) const { return j % slots_; }
  size_t W() const { return size_t(d_.qkv_width()); }
  size_t HD() const { return size_t(d_.attention_width()); }
  // The norm's forward and backward over n rows (stats: rows of its mean and rstd).
  void norm_forward(float* y, FloatBuffer& mean, FloatBuffer& rstd, int r, const float* x, const float* nw,
                    const float* nb, int n) const {
    observed(o_, spec_.norm.forward_tag, 0, [&] {
      spec_.norm.forward(y, mean.size() ? row_at(mean, r, rc_.N, 1) : nullptr, row_at(rstd, r, rc_.N, 1), x,
                         nw, nb, n, d_.C, d_.eps);
    });
    lin_.store_activation(y, n, d_.C);
  }
  void norm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* nw,
                     FloatBuffer& mean, FloatBuffer& rstd, int r, int n) const {
    observed(o_, spec_.norm.backward_tag, 0, [&] {
      spec_.norm.backward(dx, dw, db, dy, x, nw, mean.size() ? row_at(mean, r, rc_.N, 1) : nullptr,
                          row_at(rstd, r, rc_.N, 1), n, d_.C);
    });
  }
  // RoPE over the q and k heads of token rows [gr, gr + gn) of a fused qkv (or its gradient, back).
  void rope(float* q, int gr, int gn, bool back) const;

  void qkv_chunk_forward(BlockActs& a, float* dst, const float* x, const BlockTensors& w, int j);
  void mlp_chunk_step(BlockActs& a, float* out, const float* x, const BlockTensors& w, int j, int step,
                      InFlight& f);
  void mlp_chunk_forward(BlockActs& a, float* out, const float* x, const BlockTensors& w, int j);
  void mlp_chunk_backward_step(float* dres, float* datty, BlockActs& a, const float* x, const BlockTensors& w,
                               const BlockTensors& g, int j, int step, InFlight& f, const Recompute& re);
  void mlp_chunk_backward(float* dres, float* datty, BlockActs& a, const float* x, const BlockTensors& w,
                          const BlockTensors& g, int j, const Recompute& re);
  void qkv_chunk_backward_step(float* dres, float* dqkv, BlockActs& a, const float* x, const BlockTensors& w,
                               const BlockTensors& g, int j, int step, InFlight& f, bool rerun_norm);
  bool query_chunked() const;
  void attention_forward(BlockActs& a, const float* qkv);
  void attention_chunk_forward(BlockActs& a, const float* qkv, KvRows kv, int j);
  void chunked_forward(BlockActs& a, const float* x, const BlockTensors& w);
  void chunked_backward(float* dres, BlockActs& a, const float* x, const BlockTensors& w,
                        const BlockTensors& g, const Recompute& re);

  const BlockSpec& spec_;
  const BlockShape& s_;
  const BlockDims& d_;
  AttentionOp& att_;
  LinearOps& lin_;
  BlockScratch& sc_;
  RopeTables rope_;
  OpObserver* o_;
  RowChunks rc_;
  int G_;
  int slots_;
};

void Runner::rope(float* q, int gr, int gn, bool back) const {
  if (!spec_.rope) return;
  const size_t half = size_t(d_.D) / 2;
  const float* cos = rope_.cos + size_t(gr) * half;
  const float* sin = rope_.sin + size_t(gr) * half;
  const int64_t stride = int64_t(W());
  float* k = q + HD();
  if (back)
    observed(o_, "rope.bwd", 0, [&] {
      rope_backward(q, stride, gn, d_.H, d_.D, cos, sin);
      rope_backward(k, stride, gn, d_.Hkv, d_.D, cos, sin);
    });
  else
    observed(o_, "rope.fwd", 0, [&] {
      rope_forward(q, stride, gn, d_.H, d_.D, cos, sin);    // q heads
      rope_forward(k, stride, gn, d_.Hkv, d_.D, cos, sin);  // k heads
    });
}

// The norm, the qkv projection (and RoPE) of chunk j into its rows dst [n G, W].
void Runner::qkv_chunk_forward(BlockActs& a, float* dst, const float* x, const BlockTensors& w, int j) {
  const int r = rc_.begin(j), n = rc_.size(j), C = d_.C;
  float* norm1 = row_at(a.norm1, r, rc_.N, C);
  norm_forward(norm1, a.norm1_mean, a.norm1_rstd, r, x + size_t(r) * C, w.norm1_w, w.norm1_b, n);
  lin_.column_forward(dst, norm1, w.qkv_w, w.qkv_b, {n * G_, C, int(W()), "qkv", o_});
  if (spec_.rope) {
    rope(dst, r * G_, n * G_, false);
    lin_.store_activation(dst, n * G_, int64_t(W()));
  }
}

// The rest of chunk j after the attention, in Domino's three steps (model/domino.h; f: the chunk's
// collective in flight between them); out: the block output [R, C] (null: a recompute, which stops after
// the activation).
//   0: proj started (its row-parallel reduction in flight);
//   1: finished, + x = residual2, norm, up, activation, down started;
//   2: finished, + residual2 = out.
void Runner::mlp_chunk_step(BlockActs& a, float* out, const float* x, const BlockTensors& w, int j, int step,
                            InFlight& f) {
  const int R = rc_.N, r = rc_.begin(j), n = rc_.size(j), gn = n * G_, C = d_.C;
  const size_t nC = size_t(n) * C;
  float* residual2 = row_at(a.residual2, r, R, C);
  float* norm2 = row_at(a.norm2, r, R, C);
  float* up = row_at(a.up, r, R, size_t(G_) * d_.up);
  float* act = row_at(a.act, r, R, size_t(G_) * d_.act);
  float* y = out ? out + size_t(r) * C : nullptr;
  if (step == 0) {
    f = lin_.row_forward_start(residual2, row_at(a.atty, r, R, size_t(G_) * HD()), w.proj_w, w.proj_b,
                               {gn, int(HD()), C, "attn_proj", o_}, slot(j));
  } else if (step == 1) {
    finish(f);
    observed(o_, "residual.add", 0, [&] { accumulate(residual2, x + size_t(r) * C, nC); });
    norm_forward(norm2, a.norm2_mean, a.norm2_rstd, r, residual2, w.norm2_w, w.norm2_b, n);
    lin_.column_forward(up, norm2, w.up_w, w.up_b, {gn, C, d_.up, spec_.up_tag, o_});
    observed(o_, spec_.activation.forward_tag, 0, [&] { spec_.activation.forward(act, up, gn, d_.act); });
    lin_.store_activation(act, gn, d_.act);
    if (y)
      f = lin_.row_forward_start(y, act, w.down_w, w.down_b, {gn, d_.act, C, spec_.down_tag, o_}, slot(j));
  } else if (y) {
    finish(f);
    observed(o_, "residual.add", 0, [&] { accumulate(y, residual2, nC); });
  }
}

// The three steps in order; without out (a recompute) up to the activation.
void Runner::mlp_chunk_forward(BlockActs& a, float* out, const float* x, const BlockTensors& w, int j) {
  InFlight f;
  for (int k = 0; k < 3; ++k) mlp_chunk_step(a, out, x, w, j, k, f);
}

// The backward of chunk j's MLP and attention projection in two steps (model/domino.h; f: the up
// backward's dx reduction in flight between them): residual3 = residual2 + down(act(up(norm(residual2)))),
// residual2 = x + proj(atty). d(residual) rows in dres go from d(residual3) to d(residual2); datty: the
// chunk's d(atty) rows [n G, H D].
//   0: the recompute `re` asks for, down backward, activation backward, up backward started;
//   1: finished, norm backward, proj backward.
void Runner::mlp_chunk_backward_step(float* dres, float* datty, BlockActs& a, const float* x,
                                     const BlockTensors& w, const BlockTensors& g, int j, int step,
                                     InFlight& f, const Recompute& re) {
  const int R = rc_.N, r = rc_.begin(j), n = rc_.size(j), gn = n * G_, C = d_.C;
  float* norm2 = row_at(a.norm2, r, R, C);
  float* up = row_at(a.up, r, R, size_t(G_) * d_.up);
  float* act = row_at(a.act, r, R, size_t(G_) * d_.act);
  float* residual2 = row_at(a.residual2, r, R, C);
  float* dr = dres + size_t(r) * C;
  float* dnorm = sc_.dnorm.data() + size_t(slot(j)) * rc_.chunk_rows() * C;
  if (step == 0) {
    if (re.token_local) mlp_chunk_forward(a, nullptr, x, w, j);
    if (re.cheap) {  // the forward's own calls on the kept residual2 and up
      norm_forward(norm2, a.norm2_mean, a.norm2_rstd, r, residual2, w.norm2_w, w.norm2_b, n);
      observed(o_, spec_.activation.forward_tag, 0, [&] { spec_.activation.forward(act, up, gn, d_.act); });
      lin_.store_activation(act, gn, d_.act);
    }
    float* dact = sc_.dact.data();  // the linears' backwards overwrite their dx
    lin_.row_backward(dact, g.down_w, g.down_b, dr, act, w.down_w, {gn, d_.act, C, spec_.down_tag, o_});
    float* dup = sc_.dup.data();  // the activation's backward overwrites it
    observed(o_, spec_.activation.backward_tag, 0,
             [&] { spec_.activation.backward(dup, dact, up, gn, d_.act); });
    lin_.store_activation(dup, gn, d_.up);
    f = lin_.column_backward_start(dnorm, g.up_w, g.up_b, dup, norm2, w.up_w,
                                   {gn, C, d_.up, spec_.up_tag, o_}, slot(j));
    return;
  }
  finish(f);
  norm_backward(dr, g.norm2_w, g.norm2_b, dnorm, residual2, w.norm2_w, a.norm2_mean, a.norm2_rstd, r, n);
  lin_.row_backward(datty, g.proj_w, g.proj_b, dr, row_at(a.atty, r, R, size_t(G_) * HD()), w.proj_w,
                    {gn, int(HD()), C, "attn_proj", o_});
}

void Runner::mlp_chunk_backward(float* dres, float* datty, BlockActs& a, const float* x,
                                const BlockTensors& w, const BlockTensors& g, int j, const Recompute& re) {
  InFlight f;
  for (int k = 0; k < 2; ++k) mlp_chunk_backward_step(dres, datty, a, x, w, g, j, k, f, re);
}

// The backward of chunk j's RoPE, qkv projection and norm from its d(qkv) rows dqkv [n G, W] (rotated
// back in place), in two steps (f: the qkv backward's dx reduction in flight between them):
//   0: RoPE backward, the norm rerun when rerun_norm (its buffer holds another chunk, or the cheap policy
//      dropped it), the qkv backward started;
//   1: finished, norm backward.
void Runner::qkv_chunk_backward_step(float* dres, float* dqkv, BlockActs& a, const float* x,
                                     const BlockTensors& w, const BlockTensors& g, int j, int step,
                                     InFlight& f, bool rerun_norm) {
  const int r = rc_.begin(j), n = rc_.size(j), C = d_.C;
  float* dr = dres + size_t(r) * C;
  float* norm1 = row_at(a.norm1, r, rc_.N, C);
  float* dnorm = sc_.dnorm.data() + size_t(slot(j)) * rc_.chunk_rows() * C;
  const float* xr = x + size_t(r) * C;
  if (step == 0) {
    rope(dqkv, r * G_, n * G_, true);
    lin_.store_activation(dqkv, n * G_, int64_t(W()));
    if (rerun_norm) norm_forward(norm1, a.norm1_mean, a.norm1_rstd, r, xr, w.norm1_w, w.norm1_b, n);
    f = lin_.column_backward_start(dnorm, g.qkv_w, g.qkv_b, dqkv, norm1, w.qkv_w,
                                   {n * G_, C, int(W()), "qkv", o_}, slot(j));
    return;
  }
  finish(f);
  norm_backward(dr, g.norm1_w, g.norm1_b, dnorm, xr, w.norm1_w, a.norm1_mean, a.norm1_rstd, r, n);
}

// Query chunks against the K/V prefix: the shape says so (model/query_chunks.h decides it).
bool Runner::query_chunked() const {
  if (!s_.query_chunks.on) return false;
  ODY_CHECK(att_.chunks_queries() && G_ == 1,
            "block: query-chunked attention needs an op that chunks queries");
  return true;
}

// QK^T and PV over the causal half, the whole sequence at once (this rank's heads).
void Runner::attention_forward(BlockActs& a, const float* qkv) {
  observed(o_, "attention.fwd", 2.0 * s_.B * d_.H * double(s_.T) * s_.T * d_.D,
           [&] { att_.forward(a.atty.data(), a.lse.data(), qkv, s_.B, s_.T, d_.H, d_.D, a.attention); });
  lin_.store_activation(a.atty.data(), s_.N(), int64_t(HD()));
}

// Chunk j's queries against the K/V prefix, into its rows of atty and lse.
void Runner::attention_chunk_forward(BlockActs& a, const float* qkv, KvRows kv, int j) {
  const int r = rc_.begin(j), n = rc_.size(j), N = s_.N();
  observed(o_, "attention.fwd", 2.0 * d_.H * double(n) * s_.T * d_.D, [&] {
    att_.forward_chunk(row_at(a.atty, r, N, HD()), row_at(a.lse, r, N, d_.H), qkv, kv, r, n, s_.T, d_.H,
                       d_.D);
  });
  lin_.store_activation(row_at(a.atty, r, N, HD()), n, int64_t(HD()));
}

void Runner::chunked_forward(BlockActs& a, const float* x, const BlockTensors& w) {
  const int N = s_.N();
  const FusedQkv f{d_.H, d_.Hkv, d_.D};
  ODY_CHECK(
      a.qkv.size() >= size_t(rc_.chunk_rows()) * W() && a.atty.size() >= size_t(rc_.chunk_rows()) * HD(),
      "block forward: no query-chunk activations for {} tokens", N);
  const KvRows kv = kv_rows(a.qkv, a.kv, N, f, s_.query_chunks.kv);
  std::vector<InFlight> pending(size_t(rc_.count()));
  chunk_pipeline(rc_.count(), 3, interleave(), false, [&](int j, int k) {
    if (k == 0) {
      const int r = rc_.begin(j), n = rc_.size(j);
      float* qkv = row_at(a.qkv, r, N, W());
      qkv_chunk_forward(a, qkv, x, w, j);
      store_kv(a.kv, qkv, r, n, att_, s_.query_chunks.kv, s_.T, d_.H, d_.D);
      attention_chunk_forward(a, qkv, kv, j);
    }
    mlp_chunk_step(a, a.residual3.data(), x, w, j, k, pending[size_t(j)]);
  });
}

// Chunks last first (long-context-memory.md §4.3): query chunk j is the last to add to dK and dV of its
// rows, so after its attention backward its qkv and norm backward can run. Buffers holding one chunk
// hold the last one after the forward (or the recompute's pre-pass); the others are recomputed.
void Runner::chunked_backward(float* dres, BlockActs& a, const float* x, const BlockTensors& w,
                              const BlockTensors& g, const Recompute& re) {
  const int N = s_.N(), last = rc_.count() - 1;
  const FusedQkv f{d_.H, d_.Hkv, d_.D};
  const KvPrefixLayout& layout = s_.query_chunks.kv;
  ODY_CHECK(sc_.dkv.size() >= size_t(N) * size_t(layout.width()) &&
                sc_.dqkv.size() >= size_t(rc_.chunk_rows()) * W(),
            "block backward: no query-chunk scratch for {} tokens", N);
  const bool q_local = !holds_rows(a.qkv, N, W()), out_local = !holds_rows(a.atty, N, HD());
  if (re.qkv)  // the K/V prefix (and a whole qkv)
    for (int j = 0; j <= last; ++j) {
      float* qkv = row_at(a.qkv, rc_.begin(j), N, W());
      qkv_chunk_forward(a, qkv, x, w, j);
      store_kv(a.kv, qkv, rc_.begin(j), rc_.size(j), att_, layout, s_.T, d_.H, d_.D);
    }
  const KvRows kv = kv_rows(a.qkv, a.kv, N, f, layout);
  observed(o_, "memset.act_grads", 0, [&] { fill_zero(sc_.dkv.data(), size_t(N) * size_t(layout.width())); });
  const MutKvRows dkv = layout.view(sc_.dkv.data());
  // Two steps per chunk (model/domino.h): everything up to the qkv backward's start, then its finish and
  // the norm's backward; under Domino the next chunk's backward runs while the reduction is in flight.
  std::vector<InFlight> pending(size_t(rc_.count()));
  chunk_pipeline(rc_.count(), 2, interleave(), true, [&](int j, int k) {
    const int r = rc_.begin(j), n = rc_.size(j);
    float* dqkv = sc_.dqkv.data();
    if (k == 0) {
      float* qkv = row_at(a.qkv, r, N, W());
      if (q_local && j != last) qkv_chunk_forward(a, qkv, x, w, j);
      if (re.attention || (out_local && j != last)) attention_chunk_forward(a, qkv, kv, j);
      float* datty = sc_.datty.data();
      mlp_chunk_backward(dres, datty, a, x, w, g, j, re);
      observed(o_, "memset.act_grads", 0, [&] { fill_zero(sc_.dqkv.data(), size_t(n) * W()); });
      observed(o_, "attention.bwd", 4.0 * d_.H * double(n) * s_.T * d_.D, [&] {
        att_.backward_chunk(dqkv, dkv, datty, row_at(a.atty, r, N, HD()), row_at(a.lse, r, N, d_.H), qkv, kv,
                            r, n, s_.T, d_.H, d_.D);
      });
    }
    // The norm is current when the qkv recompute above (or the forward's last chunk) wrote it.
    qkv_chunk_backward_step(dres, dqkv, a, x, w, g, j, k, pending[size_t(j)],
                            !q_local && (re.cheap || re.token_local));
    if (k == 1) re.done_with_input(r, n);
  });
}

void Runner::forward(BlockActs& a, const float* x, const BlockTensors& w) {
  const int N = s_.N(), C = d_.C;
  const size_t act_rows = size_t(rc_.chunk_rows()) * G_ * d_.act;
  ODY_CHECK(a.act.size() >= act_rows && a.residual3.size() >= size_t(rc_.N) * C,
            "block forward: activations for fewer than {} tokens (act {} < {} or residual3 {} < {})", N,
            a.act.size(), act_rows, a.residual3.size(), size_t(rc_.N) * C);
  if (query_chunked()) return chunked_forward(a, x, w);
  ODY_CHECK(a.atty.size() >= size_t(N) * HD(), "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc_.qkv.data();
  for (int j = 0; j < rc_.count(); ++j) qkv_chunk_forward(a, qkv + size_t(rc_.begin(j)) * G_ * W(), x, w, j);
  attention_forward(a, qkv);
  std::vector<InFlight> pending(size_t(rc_.count()));
  chunk_pipeline(rc_.count(), 3, interleave(), false, [&](int j, int k) {
    mlp_chunk_step(a, a.residual3.data(), x, w, j, k, pending[size_t(j)]);
  });
}

void Runner::backward(float* dres, BlockActs& a, const float* x, const BlockTensors& w, const BlockTensors& g,
                      const Recompute& re) {
  const int N = s_.N();
  ODY_CHECK(sc_.dup.size() >= size_t(rc_.chunk_rows()) * G_ * d_.up &&
                a.act.size() >= size_t(rc_.chunk_rows()) * G_ * d_.act &&
                sc_.dnorm.size() >= size_t(slots_) * rc_.chunk_rows() * d_.C,
            "block backward: no backward scratch for {} tokens", N);
  if (query_chunked()) return chunked_backward(dres, a, x, w, g, re);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc_.qkv.data();
  if (re.qkv)
    for (int j = 0; j < rc_.count(); ++j)
      qkv_chunk_forward(a, qkv + size_t(rc_.begin(j)) * G_ * W(), x, w, j);
  if (re.attention) attention_forward(a, qkv);
  float* datty = sc_.datty.data();
  float* dqkv = nullptr;
  std::vector<InFlight> pending(size_t(rc_.count()));
  chunk_pipeline(rc_.count(), 2, interleave(), false, [&](int j, int k) {
    mlp_chunk_backward_step(dres, datty + size_t(rc_.begin(j)) * G_ * HD(), a, x, w, g, j, k,
                            pending[size_t(j)], re);
  });
  // Attention over the whole sequence (key-outer: its gradient over the qkv).
  observed(o_, "memset.act_grads", 0,
           [&] { dqkv = qkv_grad(qkv, sc_.dqkv, size_t(N) * W(), s_.query_chunks, att_); });
  observed(o_, "attention.bwd", 4.0 * s_.B * d_.H * double(s_.T) * s_.T * d_.D, [&] {
    att_.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s_.B, s_.T,
                  d_.H, d_.D, a.attention.get());
  });
  // RoPE, qkv and the norm, chunk by chunk (the norm recomputed when its buffer holds one chunk of
  // several, or was dropped by the cheap policy).
  const bool rerun_norm = re.cheap || (re.token_local && rc_.count() > 1);
  chunk_pipeline(rc_.count(), 2, interleave(), false, [&](int j, int k) {
    qkv_chunk_backward_step(dres, dqkv + size_t(rc_.begin(j)) * G_ * W(), a, x, w, g, j, k,
                            pending[size_t(j)], rerun_norm);
    if (k == 1) re.done_with_input(rc_.begin(j), rc_.size(j));  // the chunk's last read of x
  });
}

// A layer holding its rounded tensors in 2 bytes (bf16) computes a block call on the scratch's fp32
// buffers, lent in place of its empty fp32 ones for the call: widened first when the call reads what
// an earlier one stored (backward), and what the call computed narrowed back (forward's end). Both
// conversions are exact, since every value a call leaves there is rounded to bf16 by the policy
// (LinearOps::store_activation, Bf16Linears): the numbers are those of fp32 buffers holding them. On a
// layer without bf16 buffers (fp32) nothing is lent.
class LentWide {
 public:
  LentWide(BlockActs& a, BlockWide& w, bool widen) : a_(a), w_(w) {
    for_each_rounded(a_, w_, [&](FloatBuffer& f, Bf16Buffer& h, FloatBuffer& v) {
      if (h.size() == 0) return;
      v.fit(h.size());  // the stage sized it so (BlockWide::fit): kept as it is
      std::swap(f, v);
      if (widen) convert_to_float(h.data(), f.data(), h.size());
    });
  }
  void narrow() {
    for_each_rounded(a_, w_, [](FloatBuffer& f, Bf16Buffer& h, FloatBuffer&) {
      if (h.size()) convert_to_bf16(f.data(), h.data(), h.size());
    });
  }
  ~LentWide() {
    for_each_rounded(a_, w_, [](FloatBuffer& f, Bf16Buffer& h, FloatBuffer& v) {
      if (h.size()) std::swap(f, v);
    });
  }
  LentWide(const LentWide&) = delete;
  LentWide& operator=(const LentWide&) = delete;

 private:
  BlockActs& a_;
  BlockWide& w_;
};

}  // namespace

void block_forward(const BlockCall& call, BlockActs& a, const float* x, const BlockTensors& w) {
  LentWide lent(a, call.scratch.wide, false);
  Runner(call).forward(a, x, w);
  lent.narrow();
}

void block_backward(const BlockCall& call, float* dres, BlockActs& a, const float* x, const BlockTensors& w,
                    const BlockTensors& g, const Recompute& re) {
  LentWide lent(a, call.scratch.wide, true);
  Runner(call).backward(dres, a, x, w, g, re);
}

}  // namespace odyssey
