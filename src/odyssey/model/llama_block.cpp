#include "odyssey/model/llama_block.h"

#include <algorithm>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/rmsnorm.h"
#include "odyssey/kernels/rope.h"
#include "odyssey/kernels/swiglu.h"
#include "odyssey/model/domino.h"
#include "odyssey/model/kv_prefix.h"

namespace odyssey {

LlamaShape LlamaShape::of(const ModelConfig& c, int B, int T, int chunk, const TpSplit& tp) {
  const int t = tp.t, H = c.n_head, K = c.kv_heads(), F = c.ffn_dim();
  ODY_CHECK(H % t == 0, "model.n_head = {} does not split over parallel.tp = {}", H, t);
  ODY_CHECK(K % t == 0 || t % K == 0,
            "model.n_kv_head = {} and parallel.tp = {}: one must divide the other (key/value heads are split "
            "when tp divides them, replicated when they divide tp)",
            K, t);
  ODY_CHECK(F % t == 0, "model.d_ff = {} does not split over parallel.tp = {}", F, t);
  return {B, T, c.d_model, H / t, K % t == 0 ? K / t : 1, c.head_dim(), F / t, float(c.rms_norm_eps), chunk};
}

namespace {

// The one place a layer's buffer sizes are written: calls f(&LlamaLayerActs::buffer, floats) for each
// buffer allocate(c, B, T, keep_qkv, rows, tp) holds (allocate fits them, bytes_for sums them). Every buffer
// is visited at every shape (0 floats when it holds none), so bytes() walks this list for what is held.
//
// Under tensor parallelism a layer holds Rn = rows(N) residual-stream rows (all N, or the TP-SP
// slice) and G = N / Rn token rows of the projections per residual row (see Gpt2LayerActs): the
// stored and cheap groups count residual rows, their wide buffers (gate_up, h) G times as many token
// rows of this rank's F/t features; the sequence-wide ones hold its heads for all N tokens.
// Attention: qkv [Q, (H + 2 Hkv) D] (and kv [N, K]), atty [A, H D], lse [A H]; output residual3
// [Rn, C]. Stored (S rows): residual2 [S, C], two [S] statistics, gate_up [S G, 2F]. Cheap (R rows):
// an, bn [R, C], h [R G, F].
template <typename Fn>
void for_each_layer_buffer(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                           const TpSplit& tp, Fn&& f) {
  using L = LlamaLayerActs;
  const LlamaShape s = LlamaShape::of(c, B, T, 0, tp);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  const size_t Rn = size_t(tp.rows(s.N())), G = N / Rn;
  const LayerRows::Counts n = rows.counts(N, Rn);
  const size_t S = n.stored, R = n.cheap, Q = n.qkv, A = n.attention,
               K = n.kv;  // K: the K/V prefix's floats per row
  f(&L::an, R * C), f(&L::an_rstd, S);
  f(&L::qkv, keep_qkv ? Q * size_t(s.qkv_width()) : 0);
  f(&L::kv, keep_qkv ? N * K : 0);
  f(&L::atty, A * HD), f(&L::lse, A * s.H);
  f(&L::residual2, S * C);
  f(&L::bn, R * C), f(&L::bn_rstd, S);
  f(&L::gate_up, S * G * 2 * F), f(&L::h, R * G * F);
  f(&L::residual3, rows.output ? Rn * C : 0);
}

// The one place the scratch's sizes are written: calls f(&LlamaBlockScratch::buffer, floats) for each
// buffer allocate(c, B, T, shared_qkv, backward, chunk, tp, q) holds; every buffer at every shape (0
// floats when it holds none), so bytes() walks this list for what is held.
//
// Whole: datty, dqkv [N, ...] (key-outer: no dqkv, the gradient goes over the qkv). With query chunks,
// datty and dqkv hold one chunk [R, ...] and dkv the dK, dV of every row in the op's prefix layout
// (at least C wide: it carries the head's gradient).
template <typename Fn>
void for_each_scratch_buffer(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward, int chunk,
                             const TpSplit& tp, const QueryChunks& q, Fn&& f) {
  using S = LlamaBlockScratch;
  const LlamaShape s = LlamaShape::of(c, B, T, 0, tp);
  const size_t N = size_t(s.N()), b = backward ? 1 : 0, W = size_t(s.qkv_width()), C = size_t(s.C),
               HD = size_t(s.H) * s.D, F = size_t(s.F);
  const size_t Rn = size_t(tp.rows(s.N())), G = N / Rn, R = size_t(q.rows(int(Rn), chunk, T).chunk_rows());
  const bool qc = q.on;
  f(&S::qkv, shared_qkv ? N * W : 0);
  f(&S::datty, b * (qc ? R * HD : N * std::max(C, HD)));
  f(&S::dqkv, b * (qc ? R * W : q.key_outer ? 0 : N * W));
  f(&S::dkv, qc ? b * N * std::max(C, size_t(q.kv.width())) : 0);
  f(&S::dnorm, b * R * C * size_t(tp.slots())), f(&S::dh, b * R * G * F), f(&S::dgate_up, b * R * G * 2 * F);
}

}  // namespace

void LlamaLayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                              const TpSplit& tp) {
  fit_listed(*this, [&](auto f) { for_each_layer_buffer(c, B, T, keep_qkv, rows, tp, f); });
  attention.reset();
}

// What the buffers hold now (the list at any shape: it visits every buffer at every one), and what the
// attention op saved for backward (sized by the op, not in the list).
size_t LlamaLayerActs::bytes() const {
  return held_bytes(*this, [](auto f) { for_each_layer_buffer(ModelConfig{}, 1, 1, true, {}, {}, f); }) +
         (attention ? attention->bytes() : 0);
}

size_t LlamaLayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                                 const TpSplit& tp) {
  return listed_bytes([&](auto f) { for_each_layer_buffer(c, B, T, keep_qkv, rows, tp, f); });
}

void LlamaLayerActs::swap_cheap(LlamaLayerActs& o) {
  std::swap(an, o.an);
  std::swap(bn, o.bn);
  std::swap(h, o.h);
}

void LlamaBlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                 int chunk, const TpSplit& tp, const QueryChunks& q) {
  fit_listed(*this, [&](auto f) { for_each_scratch_buffer(c, B, T, shared_qkv, backward, chunk, tp, q, f); });
}

size_t LlamaBlockScratch::bytes() const {
  return held_bytes(*this,
                    [](auto f) { for_each_scratch_buffer(ModelConfig{}, 1, 1, true, true, 0, {}, {}, f); });
}

size_t LlamaBlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                    int chunk, const TpSplit& tp, const QueryChunks& q) {
  return listed_bytes(
      [&](auto f) { for_each_scratch_buffer(c, B, T, shared_qkv, backward, chunk, tp, q, f); });
}

LlamaLayerTensors resolve_llama_layer(const LlamaLayerParams& l,
                                      const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.attn_norm), at(*l.q), at(*l.o), at(*l.mlp_norm), at(*l.gate), at(*l.down)};
}

namespace {

// The residual stream's rows in chunks and the token rows of the projections per residual row (G:
// tp under TP-SP, else 1).
// slots: collectives in flight at once, 2 under Domino (model/domino.h).
struct Rows {
  RowChunks rc;
  int G;
  int slots;
  bool interleave() const { return slots > 1; }
  int slot(int j) const { return j % slots; }
  Rows(const LinearOps& lin, const LlamaShape& s)
      : rc{s.query_chunks.rows(int(lin.rows(s.N())), s.chunk, s.T)},
        G(s.N() / rc.N),
        slots(lin.split().slots()) {}
};

// RMSNorm, the qkv projection and RoPE of chunk j into its rows dst [n G, W].
void qkv_chunk_forward(LlamaLayerActs& a, float* dst, const float* x, const LlamaLayerTensors& w,
                       LinearOps& lin, const LlamaShape& s, const RopeTables& rope, const Rows& p, int j,
                       OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), gr = r * p.G, gn = n * p.G, C = s.C, W = s.qkv_width(),
            HD = s.H * s.D;
  const size_t half = size_t(s.D) / 2;
  float* an = row_at(a.an, r, p.rc.N, C);
  observed(o, "rmsnorm.fwd", 0, [&] {
    rmsnorm_forward(an, row_at(a.an_rstd, r, p.rc.N, 1), x + size_t(r) * C, w.attn_norm, n, C, s.eps);
  });
  lin.column_forward(dst, an, w.qkv_w, nullptr, {gn, C, W, "qkv", o});
  const float* cos = rope.cos + size_t(gr) * half;
  const float* sin = rope.sin + size_t(gr) * half;
  observed(o, "rope.fwd", 0, [&] {
    rope_forward(dst, W, gn, s.H, s.D, cos, sin);         // q heads
    rope_forward(dst + HD, W, gn, s.Hkv, s.D, cos, sin);  // k heads
  });
}

// The rest of chunk j after the attention, in Domino's three steps (model/domino.h; f: the chunk's
// collective in flight between them):
//   0: the output projection's GEMM into residual2, its reduction started;
//   1: finished, + x, RMSNorm, gate|up, SwiGLU, and with out (the layer's output [R, C]) the down
//      projection's GEMM into the chunk's rows of out, its reduction started;
//   2: finished, + residual2.
void mlp_chunk_step(LlamaLayerActs& a, float* out, const float* x, const LlamaLayerTensors& w, LinearOps& lin,
                    const LlamaShape& s, const Rows& p, int j, int step, InFlight& f, OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), gn = n * p.G, C = s.C, HD = s.H * s.D, F = s.F, R = p.rc.N;
  const size_t nC = size_t(n) * C;
  float* residual2 = row_at(a.residual2, r, R, C);
  float* bn = row_at(a.bn, r, R, C);
  float* gate_up = row_at(a.gate_up, r, R, size_t(p.G) * 2 * F);
  float* h = row_at(a.h, r, R, size_t(p.G) * F);
  float* y = out ? out + size_t(r) * C : nullptr;
  if (step == 0) {
    f = lin.row_forward_start(residual2, row_at(a.atty, r, R, size_t(p.G) * HD), w.o_w, nullptr,
                              {gn, HD, C, "attn_proj", o}, p.slot(j));
  } else if (step == 1) {
    finish(f);
    observed(o, "residual.add", 0, [&] { accumulate(residual2, x + size_t(r) * C, nC); });
    observed(o, "rmsnorm.fwd", 0,
             [&] { rmsnorm_forward(bn, row_at(a.bn_rstd, r, R, 1), residual2, w.mlp_norm, n, C, s.eps); });
    lin.column_forward(gate_up, bn, w.gate_up_w, nullptr, {gn, C, 2 * F, "gate_up", o});
    observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(h, gate_up, gn, F); });
    if (y) f = lin.row_forward_start(y, h, w.down_w, nullptr, {gn, F, C, "down", o}, p.slot(j));
  } else if (y) {
    finish(f);
    observed(o, "residual.add", 0, [&] { accumulate(y, residual2, nC); });
  }
}

// The three steps in order; without out (a recompute) up to the SwiGLU.
void mlp_chunk_forward(LlamaLayerActs& a, float* out, const float* x, const LlamaLayerTensors& w,
                       LinearOps& lin, const LlamaShape& s, const Rows& p, int j, OpObserver* o) {
  InFlight f;
  for (int k = 0; k < 3; ++k) mlp_chunk_step(a, out, x, w, lin, s, p, j, k, f, o);
}

// The backward of chunk j's MLP and output projection in two steps (model/domino.h; f: the gate|up
// backward's dx reduction in flight between them): residual3 = residual2 +
// down(swiglu(gate_up(rmsnorm(residual2)))), residual2 = x + o_proj(atty). datty: the chunk's d(atty)
// rows [n G, H D].
//   0: the recompute `re` asks for, down backward, SwiGLU backward, gate|up backward started;
//   1: finished, RMSNorm backward, o_proj backward.
void mlp_chunk_backward_step(float* dres, float* datty, LlamaLayerActs& a, const float* x,
                             const LlamaLayerTensors& w, const LlamaLayerTensors& g, LinearOps& lin,
                             LlamaBlockScratch& sc, const LlamaShape& s, const Rows& p, int j, int step,
                             InFlight& f, OpObserver* o, const Recompute& re) {
  const int R = p.rc.N, C = s.C, HD = s.H * s.D, F = s.F;
  const int r = p.rc.begin(j), n = p.rc.size(j), gn = n * p.G;
  float* residual2 = row_at(a.residual2, r, R, C);
  float* bn = row_at(a.bn, r, R, C);
  float* bn_rstd = row_at(a.bn_rstd, r, R, 1);
  float* gate_up = row_at(a.gate_up, r, R, size_t(p.G) * 2 * F);
  float* h = row_at(a.h, r, R, size_t(p.G) * F);
  float* dr = dres + size_t(r) * C;
  float* dnorm = sc.dnorm.data() + size_t(p.slot(j)) * p.rc.chunk_rows() * C;
  if (step == 0) {
    if (re.token_local) mlp_chunk_forward(a, nullptr, x, w, lin, s, p, j, o);
    if (re.cheap) {  // the forward's own calls on the kept residual2 and gate_up
      observed(o, "rmsnorm.fwd", 0,
               [&] { rmsnorm_forward(bn, bn_rstd, residual2, w.mlp_norm, n, C, s.eps); });
      observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(h, gate_up, gn, F); });
    }
    float* dh = sc.dh.data();  // the linears' backwards overwrite their dx
    float* dgate_up = sc.dgate_up.data();
    lin.row_backward(dh, g.down_w, nullptr, dr, h, w.down_w, {gn, F, C, "down", o});
    observed(o, "swiglu.bwd", 0, [&] { swiglu_backward(dgate_up, dh, gate_up, gn, F); });
    f = lin.column_backward_start(dnorm, g.gate_up_w, nullptr, dgate_up, bn, w.gate_up_w,
                                  {gn, C, 2 * F, "gate_up", o}, p.slot(j));
    return;
  }
  finish(f);
  observed(o, "rmsnorm.bwd", 0,
           [&] { rmsnorm_backward(dr, g.mlp_norm, dnorm, residual2, w.mlp_norm, bn_rstd, n, C); });
  lin.row_backward(datty, g.o_w, nullptr, dr, row_at(a.atty, r, R, size_t(p.G) * HD), w.o_w,
                   {gn, HD, C, "attn_proj", o});
}

void mlp_chunk_backward(float* dres, float* datty, LlamaLayerActs& a, const float* x,
                        const LlamaLayerTensors& w, const LlamaLayerTensors& g, LinearOps& lin,
                        LlamaBlockScratch& sc, const LlamaShape& s, const Rows& p, int j, OpObserver* o,
                        const Recompute& re) {
  InFlight f;
  for (int k = 0; k < 2; ++k) mlp_chunk_backward_step(dres, datty, a, x, w, g, lin, sc, s, p, j, k, f, o, re);
}

// The backward of chunk j's RoPE, qkv projection and RMSNorm from its d(qkv) rows dq [n G, W] (rotated
// back in place), in two steps (f: the qkv backward's dx reduction in flight between them):
//   0: RoPE backward, the norm rerun when rerun_norm, the qkv backward started;
//   1: finished, RMSNorm backward.
void qkv_chunk_backward_step(float* dres, float* dq, LlamaLayerActs& a, const float* x,
                             const LlamaLayerTensors& w, const LlamaLayerTensors& g, LinearOps& lin,
                             LlamaBlockScratch& sc, const LlamaShape& s, const RopeTables& rope,
                             const Rows& p, int j, int step, InFlight& f, OpObserver* o, bool rerun_norm) {
  const int R = p.rc.N, C = s.C, W = s.qkv_width(), HD = s.H * s.D;
  const int r = p.rc.begin(j), n = p.rc.size(j), gr = r * p.G, gn = n * p.G;
  const size_t half = size_t(s.D) / 2;
  float* an = row_at(a.an, r, R, C);
  float* an_rstd = row_at(a.an_rstd, r, R, 1);
  float* dr = dres + size_t(r) * C;
  float* dnorm = sc.dnorm.data() + size_t(p.slot(j)) * p.rc.chunk_rows() * C;
  if (step == 0) {
    const float* cos = rope.cos + size_t(gr) * half;
    const float* sin = rope.sin + size_t(gr) * half;
    observed(o, "rope.bwd", 0, [&] {
      rope_backward(dq, W, gn, s.H, s.D, cos, sin);
      rope_backward(dq + HD, W, gn, s.Hkv, s.D, cos, sin);
    });
    if (rerun_norm)
      observed(o, "rmsnorm.fwd", 0,
               [&] { rmsnorm_forward(an, an_rstd, x + size_t(r) * C, w.attn_norm, n, C, s.eps); });
    f = lin.column_backward_start(dnorm, g.qkv_w, nullptr, dq, an, w.qkv_w, {gn, C, W, "qkv", o}, p.slot(j));
    return;
  }
  finish(f);
  observed(o, "rmsnorm.bwd", 0,
           [&] { rmsnorm_backward(dr, g.attn_norm, dnorm, x + size_t(r) * C, w.attn_norm, an_rstd, n, C); });
}

// Query chunks against the K/V prefix: the shape says so (model/query_chunks.h decides it).
bool query_chunked(const LlamaShape& s, const Rows& p, const AttentionOp& attention) {
  if (!s.query_chunks.on) return false;
  ODY_CHECK(attention.chunks_queries() && p.G == 1,
            "block: query-chunked attention needs an op that chunks queries");
  return true;
}

void attention_chunk_forward(LlamaLayerActs& a, const float* qkv, KvRows kv, AttentionOp& attention,
                             const LlamaShape& s, const Rows& p, int j, OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), N = s.N();
  observed(o, "attention.fwd", 2.0 * s.H * double(n) * s.T * s.D, [&] {
    attention.forward_chunk(row_at(a.atty, r, N, size_t(s.H) * s.D), row_at(a.lse, r, N, s.H), qkv, kv, r, n,
                            s.T, s.H, s.D);
  });
}

void chunked_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w, AttentionOp& attention,
                     LinearOps& lin, const LlamaShape& s, const RopeTables& rope, const Rows& p,
                     OpObserver* o) {
  const int N = s.N(), W = s.qkv_width();
  const FusedQkv f{s.H, s.Hkv, s.D};
  ODY_CHECK(
      a.qkv.size() >= size_t(p.rc.chunk_rows()) * W && a.atty.size() >= size_t(p.rc.chunk_rows()) * s.H * s.D,
      "block forward: no query-chunk activations for {} tokens", N);
  const KvRows kv = kv_rows(a.qkv, a.kv, N, f, s.query_chunks.kv);
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 3, p.interleave(), false, [&](int j, int k) {
    if (k == 0) {
      const int r = p.rc.begin(j), n = p.rc.size(j);
      float* qkv = row_at(a.qkv, r, N, W);
      qkv_chunk_forward(a, qkv, x, w, lin, s, rope, p, j, o);
      store_kv(a.kv, qkv, r, n, attention, s.query_chunks.kv, s.T, s.H, s.D);
      attention_chunk_forward(a, qkv, kv, attention, s, p, j, o);
    }
    mlp_chunk_step(a, a.residual3.data(), x, w, lin, s, p, j, k, pending[size_t(j)], o);
  });
}

// Chunks last first, as gpt2_block.cpp's chunked_backward; RoPE's backward rotates dq and the chunk's
// complete dK back.
void chunked_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                      const LlamaLayerTensors& g, AttentionOp& attention, LinearOps& lin,
                      LlamaBlockScratch& sc, const LlamaShape& s, const RopeTables& rope, const Rows& p,
                      OpObserver* o, const Recompute& re) {
  const int N = s.N(), W = s.qkv_width(), HD = s.H * s.D, last = p.rc.count() - 1;
  const FusedQkv f{s.H, s.Hkv, s.D};
  const KvPrefixLayout& layout = s.query_chunks.kv;
  ODY_CHECK(
      sc.dkv.size() >= size_t(N) * size_t(layout.width()) && sc.dqkv.size() >= size_t(p.rc.chunk_rows()) * W,
      "block backward: no query-chunk scratch for {} tokens", N);
  const bool q_local = !holds_rows(a.qkv, N, size_t(W)), out_local = !holds_rows(a.atty, N, size_t(HD));
  if (re.qkv)  // the K/V prefix (and a whole qkv)
    for (int j = 0; j <= last; ++j) {
      float* qkv = row_at(a.qkv, p.rc.begin(j), N, W);
      qkv_chunk_forward(a, qkv, x, w, lin, s, rope, p, j, o);
      store_kv(a.kv, qkv, p.rc.begin(j), p.rc.size(j), attention, layout, s.T, s.H, s.D);
    }
  const KvRows kv = kv_rows(a.qkv, a.kv, N, f, layout);
  observed(o, "memset.act_grads", 0, [&] { fill_zero(sc.dkv.data(), size_t(N) * size_t(layout.width())); });
  const MutKvRows dkv = layout.view(sc.dkv.data());
  // Two steps per chunk (model/domino.h), as gpt2_block.cpp's chunked_backward.
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 2, p.interleave(), true, [&](int j, int k) {
    const int r = p.rc.begin(j), n = p.rc.size(j);
    float* dqkv = sc.dqkv.data();
    if (k == 0) {
      float* qkv = row_at(a.qkv, r, N, W);
      if (q_local && j != last) qkv_chunk_forward(a, qkv, x, w, lin, s, rope, p, j, o);
      if (re.attention || (out_local && j != last))
        attention_chunk_forward(a, qkv, kv, attention, s, p, j, o);
      float* datty = sc.datty.data();
      mlp_chunk_backward(dres, datty, a, x, w, g, lin, sc, s, p, j, o, re);
      observed(o, "memset.act_grads", 0, [&] { fill_zero(sc.dqkv.data(), size_t(n) * W); });
      observed(o, "attention.bwd", 4.0 * s.H * double(n) * s.T * s.D, [&] {
        attention.backward_chunk(dqkv, dkv, datty, row_at(a.atty, r, N, HD), row_at(a.lse, r, N, s.H), qkv,
                                 kv, r, n, s.T, s.H, s.D);
      });
    }
    // The norm is current when the qkv recompute above (or the forward's last chunk) wrote it.
    qkv_chunk_backward_step(dres, dqkv, a, x, w, g, lin, sc, s, rope, p, j, k, pending[size_t(j)], o,
                            !q_local && (re.cheap || re.token_local));
    if (k == 1) re.done_with_input(r, n);
  });
}

}  // namespace

void llama_block_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                         AttentionOp& attention, LinearOps& lin, LlamaBlockScratch& scratch,
                         const LlamaShape& s, const RopeTables& rope, OpObserver* o) {
  const int N = s.N();
  const Rows p(lin, s);
  ODY_CHECK(a.h.size() >= size_t(p.rc.chunk_rows()) * p.G * s.F && a.residual3.size() >= size_t(p.rc.N) * s.C,
            "block forward: activations for fewer than {} tokens", N);
  if (query_chunked(s, p, attention)) return chunked_forward(a, x, w, attention, lin, s, rope, p, o);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  for (int j = 0; j < p.rc.count(); ++j)
    qkv_chunk_forward(a, qkv + size_t(p.rc.begin(j)) * p.G * s.qkv_width(), x, w, lin, s, rope, p, j, o);
  observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
           [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 3, p.interleave(), false, [&](int j, int k) {
    mlp_chunk_step(a, a.residual3.data(), x, w, lin, s, p, j, k, pending[size_t(j)], o);
  });
}

void llama_block_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                          const LlamaLayerTensors& g, AttentionOp& attention, LinearOps& lin,
                          LlamaBlockScratch& sc, const LlamaShape& s, const RopeTables& rope, OpObserver* o,
                          const Recompute& re) {
  const int N = s.N(), W = s.qkv_width(), HD = s.H * s.D, F = s.F;
  const Rows p(lin, s);
  ODY_CHECK(sc.dgate_up.size() >= size_t(p.rc.chunk_rows()) * p.G * 2 * F &&
                a.h.size() >= size_t(p.rc.chunk_rows()) * p.G * F &&
                sc.dnorm.size() >= size_t(p.slots) * p.rc.chunk_rows() * s.C,
            "block backward: no backward scratch for {} tokens", N);
  if (query_chunked(s, p, attention))
    return chunked_backward(dres, a, x, w, g, attention, lin, sc, s, rope, p, o, re);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc.qkv.data();
  if (re.qkv)
    for (int j = 0; j < p.rc.count(); ++j)
      qkv_chunk_forward(a, qkv + size_t(p.rc.begin(j)) * p.G * W, x, w, lin, s, rope, p, j, o);
  if (re.attention)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  float *datty = sc.datty.data(), *dqkv = nullptr;
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 2, p.interleave(), false, [&](int j, int k) {
    mlp_chunk_backward_step(dres, datty + size_t(p.rc.begin(j)) * p.G * HD, a, x, w, g, lin, sc, s, p, j, k,
                            pending[size_t(j)], o, re);
  });
  // Attention over the whole sequence (key-outer: its gradient over the qkv).
  observed(o, "memset.act_grads", 0,
           [&] { dqkv = qkv_grad(qkv, sc.dqkv, size_t(N) * W, s.query_chunks, attention); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D, [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D, a.attention.get());
  });
  // RoPE, qkv and RMSNorm, chunk by chunk (the norm recomputed when its buffer holds one chunk of
  // several, or was dropped by the cheap policy).
  const bool rerun_norm = re.cheap || (re.token_local && p.rc.count() > 1);
  chunk_pipeline(p.rc.count(), 2, p.interleave(), false, [&](int j, int k) {
    qkv_chunk_backward_step(dres, dqkv + size_t(p.rc.begin(j)) * p.G * W, a, x, w, g, lin, sc, s, rope, p, j,
                            k, pending[size_t(j)], o, rerun_norm);
    if (k == 1) re.done_with_input(p.rc.begin(j), p.rc.size(j));  // the chunk's last read of x
  });
}

}  // namespace odyssey
