#include "odyssey/model/gpt2_block.h"

#include <algorithm>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/model/domino.h"
#include "odyssey/model/kv_prefix.h"

namespace odyssey {

namespace {

// The one place a layer's buffer sizes are written: calls f(&Gpt2LayerActs::buffer, floats) for each
// buffer allocate(c, B, T, keep_qkv, rows, tp) holds (allocate fits them, bytes_for sums them). Every buffer
// is visited at every shape (0 floats when it holds none), so bytes() walks this list for what is held.
//
// Under tensor parallelism a layer holds Rn = rows(N) residual-stream rows (all N, or the TP-SP slice)
// and, for the projections' outputs, G = N / Rn token rows per residual row: the stored and cheap
// groups count residual rows, their wide buffers (fch, fch_gelu) G times as many token rows of this
// rank's 4C/t features; the sequence-wide ones hold its H/t heads of all N tokens.
// Attention: qkv [Q, 3C/t] (and kv [N, K]), atty [A, C/t], lse [A H/t]; output residual3 [Rn, C].
// Stored (S rows): residual2 [S, C], four [S] statistics, fch [S G, 4C/t]. Cheap (R rows): ln1, ln2
// [R, C], fch_gelu [R G, 4C/t].
template <typename F>
void for_each_layer_buffer(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                           const TpSplit& tp, F&& f) {
  using L = Gpt2LayerActs;
  const size_t N = size_t(B) * T, C = size_t(c.d_model), t = size_t(tp.t), Rn = size_t(tp.rows(N)),
               G = N / Rn;
  const LayerRows::Counts n = rows.counts(N, Rn);
  const size_t S = n.stored, R = n.cheap, Q = n.qkv, A = n.attention,
               K = n.kv;  // K: the K/V prefix's floats per row
  f(&L::ln1, R * C), f(&L::ln1_mean, S), f(&L::ln1_rstd, S);
  f(&L::qkv, keep_qkv ? Q * 3 * C / t : 0);
  f(&L::kv, keep_qkv ? N * K : 0);
  f(&L::atty, A * C / t), f(&L::lse, A * c.n_head / t);
  f(&L::residual2, S * C);
  f(&L::ln2, R * C), f(&L::ln2_mean, S), f(&L::ln2_rstd, S);
  f(&L::fch, S * G * 4 * C / t), f(&L::fch_gelu, R * G * 4 * C / t);
  f(&L::residual3, rows.output ? Rn * C : 0);
}

// The one place the scratch's sizes are written: calls f(&Gpt2BlockScratch::buffer, floats) for each
// buffer allocate(c, B, T, shared_qkv, backward, chunk, tp, q) holds; every buffer at every shape (0
// floats when it holds none), so bytes() walks this list for what is held.
//
// With query chunks, datty and dqkv hold one chunk (A = R rows) and dkv the dK, dV of every row in
// the op's prefix layout (at least C wide: it carries the head's gradient). Key-outer (ring, hybrid):
// no dqkv, the op's backward writes the gradient over the layer's qkv.
template <typename F>
void for_each_scratch_buffer(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward, int chunk,
                             const TpSplit& tp, const QueryChunks& q, F&& f) {
  using S = Gpt2BlockScratch;
  const size_t N = size_t(B) * T, C = size_t(c.d_model), b = backward ? 1 : 0, t = size_t(tp.t);
  const size_t Rn = size_t(tp.rows(N)), G = N / Rn, R = size_t(q.rows(int(Rn), chunk, T).chunk_rows());
  const bool qc = q.on;
  const size_t A = qc ? R : N;
  f(&S::qkv, shared_qkv ? N * 3 * C / t : 0);
  // datty also carries the stage's d(final norm output) [Rn, C] from the LM head (wider under plain TP)
  // unless it holds one chunk: then dkv carries it.
  f(&S::datty, b * (qc ? A * C / t : std::max(N * C / t, Rn * C)));
  f(&S::dqkv, q.key_outer ? 0 : b * A * 3 * C / t);
  f(&S::dkv, qc ? b * N * std::max(size_t(q.kv.width()), C) : 0);
  f(&S::dln, b * R * C * size_t(tp.slots())), f(&S::dfch, b * R * G * 4 * C / t),
      f(&S::dfch_gelu, b * R * G * 4 * C / t);
}

}  // namespace

void Gpt2LayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                             const TpSplit& tp) {
  fit_listed(*this, [&](auto f) { for_each_layer_buffer(c, B, T, keep_qkv, rows, tp, f); });
  attention.reset();  // saved for another shape
}

// What the buffers hold now (the list at any shape: it visits every buffer at every one), and what the
// attention op saved for backward (sized by the op, not in the list).
size_t Gpt2LayerActs::bytes() const {
  return held_bytes(*this, [](auto f) { for_each_layer_buffer(ModelConfig{}, 1, 1, true, {}, {}, f); }) +
         (attention ? attention->bytes() : 0);
}

size_t Gpt2LayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                                const TpSplit& tp) {
  return listed_bytes([&](auto f) { for_each_layer_buffer(c, B, T, keep_qkv, rows, tp, f); });
}

void Gpt2LayerActs::swap_cheap(Gpt2LayerActs& o) {
  std::swap(ln1, o.ln1);
  std::swap(ln2, o.ln2);
  std::swap(fch_gelu, o.fch_gelu);
}

void Gpt2BlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward, int chunk,
                                const TpSplit& tp, const QueryChunks& q) {
  fit_listed(*this, [&](auto f) { for_each_scratch_buffer(c, B, T, shared_qkv, backward, chunk, tp, q, f); });
}

size_t Gpt2BlockScratch::bytes() const {
  return held_bytes(*this,
                    [](auto f) { for_each_scratch_buffer(ModelConfig{}, 1, 1, true, true, 0, {}, {}, f); });
}

size_t Gpt2BlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                   int chunk, const TpSplit& tp, const QueryChunks& q) {
  return listed_bytes(
      [&](auto f) { for_each_scratch_buffer(c, B, T, shared_qkv, backward, chunk, tp, q, f); });
}

Gpt2LayerTensors resolve_layer(const LayerParams& l, const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.ln1_w), at(*l.ln1_b), at(*l.qkv_w), at(*l.qkv_b), at(*l.attn_proj_w), at(*l.attn_proj_b),
          at(*l.ln2_w), at(*l.ln2_b), at(*l.fc_w),  at(*l.fc_b),  at(*l.fc_proj_w),   at(*l.fc_proj_b)};
}

namespace {

// A block call's sizes on this rank: the residual stream's R rows in chunks (rc), G token rows of
// the projections per residual row, and this rank's heads and widths.
struct Split {
  int t, G, H, W1, W3, W4;  // W1 = C/t (attention output), W3 = 3C/t (qkv), W4 = 4C/t (MLP)
  RowChunks rc;
  int slots;  // collectives in flight at once: 2 under Domino (model/domino.h), else 1
  bool interleave() const { return slots > 1; }
  int slot(int j) const { return j % slots; }
  Split(const LinearOps& lin, const BlockShape& s)
      : t(lin.tp()),
        G(s.N() / int(lin.rows(s.N()))),
        H(s.H / t),
        W1(s.C / t),
        W3(3 * s.C / t),
        W4(4 * s.C / t),
        rc{s.query_chunks.rows(int(lin.rows(s.N())), s.chunk, s.T)},
        slots(lin.split().slots()) {}
};

// Layer-norm 1 and the qkv projection of chunk j into its rows dst [n G, 3C/t].
void qkv_chunk_forward(Gpt2LayerActs& a, float* dst, const float* x, const Gpt2LayerTensors& w,
                       LinearOps& lin, const Split& p, int j, int C, OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), R = p.rc.N;
  float* ln1 = row_at(a.ln1, r, R, C);
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(ln1, row_at(a.ln1_mean, r, R, 1), row_at(a.ln1_rstd, r, R, 1), x + size_t(r) * C,
                      w.ln1_w, w.ln1_b, n, C);
  });
  lin.column_forward(dst, ln1, w.qkv_w, w.qkv_b, {n * p.G, C, p.W3, "qkv", o});
}

// The rest of chunk j after the attention, in Domino's three steps (model/domino.h; f: the chunk's
// collective in flight between them):
//   0: the attention projection's GEMM into residual2, its reduction started;
//   1: finished (+ bias), + x, ln2, fc, gelu, and with out (the layer's output [R, C]) the MLP
//      projection's GEMM into the chunk's rows of out, its reduction started;
//   2: finished (+ bias), + residual2.
void mlp_chunk_step(Gpt2LayerActs& a, float* out, const float* x, const Gpt2LayerTensors& w, LinearOps& lin,
                    const Split& p, int j, int step, InFlight& f, int C, OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), R = p.rc.N, gn = n * p.G;
  const size_t nC = size_t(n) * C;
  float* residual2 = row_at(a.residual2, r, R, C);
  float* ln2 = row_at(a.ln2, r, R, C);
  float* fch = row_at(a.fch, r, R, size_t(p.G) * p.W4);
  float* fch_gelu = row_at(a.fch_gelu, r, R, size_t(p.G) * p.W4);
  float* y = out ? out + size_t(r) * C : nullptr;
  if (step == 0) {
    // residual2 = x + atty W_proj^T + b (the projection is written into residual2, then x added)
    f = lin.row_forward_start(residual2, row_at(a.atty, r, R, size_t(p.G) * p.W1), w.attn_proj_w,
                              w.attn_proj_b, {gn, p.W1, C, "attn_proj", o}, p.slot(j));
  } else if (step == 1) {
    finish(f);
    observed(o, "residual.add", 0, [&] { accumulate(residual2, x + size_t(r) * C, nC); });
    observed(o, "layernorm.fwd", 0, [&] {
      layernorm_forward(ln2, row_at(a.ln2_mean, r, R, 1), row_at(a.ln2_rstd, r, R, 1), residual2, w.ln2_w,
                        w.ln2_b, n, C);
    });
    lin.column_forward(fch, ln2, w.fc_w, w.fc_b, {gn, C, p.W4, "fc", o});
    observed(o, "gelu.fwd", 0, [&] { gelu_forward(fch_gelu, fch, size_t(gn) * p.W4); });
    if (y)
      f = lin.row_forward_start(y, fch_gelu, w.fc_proj_w, w.fc_proj_b, {gn, p.W4, C, "fc_proj", o},
                                p.slot(j));
  } else if (y) {
    finish(f);
    observed(o, "residual.add", 0, [&] { accumulate(y, residual2, nC); });
  }
}

// The three steps in order; without out (a recompute) up to the gelu.
void mlp_chunk_forward(Gpt2LayerActs& a, float* out, const float* x, const Gpt2LayerTensors& w,
                       LinearOps& lin, const Split& p, int j, int C, OpObserver* o) {
  InFlight f;
  for (int k = 0; k < 3; ++k) mlp_chunk_step(a, out, x, w, lin, p, j, k, f, C, o);
}

// The backward of chunk j's MLP and attention projection in two steps (model/domino.h; f: the fc
// backward's dx reduction in flight between them): residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))),
// residual2 = x + proj(atty). d(residual) rows in dres go from d(residual3) to d(residual2); datty: the
// chunk's d(atty) rows [n G, C/t].
//   0: the recompute `re` asks for, fc_proj backward, gelu backward, fc backward started;
//   1: finished, ln2 backward, attn_proj backward.
void mlp_chunk_backward_step(float* dres, float* datty, Gpt2LayerActs& a, const float* x,
                             const Gpt2LayerTensors& w, const Gpt2LayerTensors& g, LinearOps& lin,
                             Gpt2BlockScratch& sc, const Split& p, int j, int step, InFlight& f, int C,
                             OpObserver* o, const Recompute& re) {
  const int R = p.rc.N, r = p.rc.begin(j), n = p.rc.size(j), gn = n * p.G;
  const size_t gW4 = size_t(gn) * p.W4;
  float* ln2 = row_at(a.ln2, r, R, C);
  float* fch = row_at(a.fch, r, R, size_t(p.G) * p.W4);
  float* fch_gelu = row_at(a.fch_gelu, r, R, size_t(p.G) * p.W4);
  float* residual2 = row_at(a.residual2, r, R, C);
  float* ln2_mean = row_at(a.ln2_mean, r, R, 1);
  float* ln2_rstd = row_at(a.ln2_rstd, r, R, 1);
  float* dr = dres + size_t(r) * C;
  float* dln = sc.dln.data() + size_t(p.slot(j)) * p.rc.chunk_rows() * C;
  if (step == 0) {
    if (re.token_local) mlp_chunk_forward(a, nullptr, x, w, lin, p, j, C, o);
    if (re.cheap) {  // the forward's own calls on the kept residual2 and fch
      observed(o, "layernorm.fwd", 0,
               [&] { layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2_w, w.ln2_b, n, C); });
      observed(o, "gelu.fwd", 0, [&] { gelu_forward(fch_gelu, fch, gW4); });
    }
    float* dfch_gelu = sc.dfch_gelu.data();  // the linears' backwards overwrite their dx
    lin.row_backward(dfch_gelu, g.fc_proj_w, g.fc_proj_b, dr, fch_gelu, w.fc_proj_w,
                     {gn, p.W4, C, "fc_proj", o});
    float* dfch = sc.dfch.data();  // gelu_backward overwrites it
    observed(o, "gelu.bwd", 0, [&] { gelu_backward(dfch, fch, dfch_gelu, gW4); });
    f = lin.column_backward_start(dln, g.fc_w, g.fc_b, dfch, ln2, w.fc_w, {gn, C, p.W4, "fc", o}, p.slot(j));
    return;
  }
  finish(f);
  observed(o, "layernorm.bwd", 0, [&] {
    layernorm_backward(dr, g.ln2_w, g.ln2_b, dln, residual2, w.ln2_w, ln2_mean, ln2_rstd, n, C);
  });
  lin.row_backward(datty, g.attn_proj_w, g.attn_proj_b, dr, row_at(a.atty, r, R, size_t(p.G) * p.W1),
                   w.attn_proj_w, {gn, p.W1, C, "attn_proj", o});
}

void mlp_chunk_backward(float* dres, float* datty, Gpt2LayerActs& a, const float* x,
                        const Gpt2LayerTensors& w, const Gpt2LayerTensors& g, LinearOps& lin,
                        Gpt2BlockScratch& sc, const Split& p, int j, int C, OpObserver* o,
                        const Recompute& re) {
  InFlight f;
  for (int k = 0; k < 2; ++k) mlp_chunk_backward_step(dres, datty, a, x, w, g, lin, sc, p, j, k, f, C, o, re);
}

// The backward of chunk j's qkv projection and ln1 from its d(qkv) rows dqkv [n G, 3C/t], in two steps
// (f: the qkv backward's dx reduction in flight between them):
//   0: ln1 rerun when rerun_ln1 (its buffer holds another chunk, or the cheap policy dropped it), the
//      qkv backward started;
//   1: finished, ln1 backward.
void qkv_chunk_backward_step(float* dres, const float* dqkv, Gpt2LayerActs& a, const float* x,
                             const Gpt2LayerTensors& w, const Gpt2LayerTensors& g, LinearOps& lin,
                             Gpt2BlockScratch& sc, const Split& p, int j, int step, InFlight& f, int C,
                             OpObserver* o, bool rerun_ln1) {
  const int R = p.rc.N, r = p.rc.begin(j), n = p.rc.size(j);
  float* dr = dres + size_t(r) * C;
  float* ln1 = row_at(a.ln1, r, R, C);
  float* ln1_mean = row_at(a.ln1_mean, r, R, 1);
  float* ln1_rstd = row_at(a.ln1_rstd, r, R, 1);
  float* dln = sc.dln.data() + size_t(p.slot(j)) * p.rc.chunk_rows() * C;
  if (step == 0) {
    if (rerun_ln1)
      observed(o, "layernorm.fwd", 0, [&] {
        layernorm_forward(ln1, ln1_mean, ln1_rstd, x + size_t(r) * C, w.ln1_w, w.ln1_b, n, C);
      });
    f = lin.column_backward_start(dln, g.qkv_w, g.qkv_b, dqkv, ln1, w.qkv_w, {n * p.G, C, p.W3, "qkv", o},
                                  p.slot(j));
    return;
  }
  finish(f);
  observed(o, "layernorm.bwd", 0, [&] {
    layernorm_backward(dr, g.ln1_w, g.ln1_b, dln, x + size_t(r) * C, w.ln1_w, ln1_mean, ln1_rstd, n, C);
  });
}

// Query chunks against the K/V prefix: the shape says so (model/query_chunks.h decides it).
bool query_chunked(const BlockShape& s, const Split& p, const AttentionOp& attention) {
  if (!s.query_chunks.on) return false;
  ODY_CHECK(attention.chunks_queries() && p.G == 1,
            "block: query-chunked attention needs an op that chunks queries");
  return true;
}

// Chunk j's queries against the K/V prefix, into its rows of atty and lse.
void attention_chunk_forward(Gpt2LayerActs& a, const float* qkv, KvRows kv, AttentionOp& attention,
                             const Split& p, const BlockShape& s, int j, OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), N = s.N();
  observed(o, "attention.fwd", 2.0 * p.H * double(n) * s.T * s.D(), [&] {
    attention.forward_chunk(row_at(a.atty, r, N, p.W1), row_at(a.lse, r, N, p.H), qkv, kv, r, n, s.T, p.H,
                            s.D());
  });
}

void chunked_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                     LinearOps& lin, const Split& p, const BlockShape& s, OpObserver* o) {
  const int N = s.N();
  const FusedQkv f{p.H, p.H, s.D()};
  ODY_CHECK(
      a.qkv.size() >= size_t(p.rc.chunk_rows()) * p.W3 && a.atty.size() >= size_t(p.rc.chunk_rows()) * p.W1,
      "block forward: no query-chunk activations for {} tokens", N);
  const KvRows kv = kv_rows(a.qkv, a.kv, N, f, s.query_chunks.kv);
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 3, p.interleave(), false, [&](int j, int k) {
    if (k == 0) {
      const int r = p.rc.begin(j), n = p.rc.size(j);
      float* qkv = row_at(a.qkv, r, N, p.W3);
      qkv_chunk_forward(a, qkv, x, w, lin, p, j, s.C, o);
      store_kv(a.kv, qkv, r, n, attention, s.query_chunks.kv, s.T, p.H, s.D());
      attention_chunk_forward(a, qkv, kv, attention, p, s, j, o);
    }
    mlp_chunk_step(a, a.residual3.data(), x, w, lin, p, j, k, pending[size_t(j)], s.C, o);
  });
}

// Chunks last first (long-context-memory.md §4.3): query chunk j is the last to add to dK and dV of its
// rows, so after its attention backward its qkv and ln1 backward can run. Buffers holding one chunk
// hold the last one after the forward (or the recompute's pre-pass); the others are recomputed.
void chunked_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                      const Gpt2LayerTensors& g, AttentionOp& attention, LinearOps& lin, Gpt2BlockScratch& sc,
                      const Split& p, const BlockShape& s, OpObserver* o, const Recompute& re) {
  const int N = s.N(), last = p.rc.count() - 1;
  const FusedQkv f{p.H, p.H, s.D()};
  const KvPrefixLayout& layout = s.query_chunks.kv;
  ODY_CHECK(sc.dkv.size() >= size_t(N) * size_t(layout.width()) &&
                sc.dqkv.size() >= size_t(p.rc.chunk_rows()) * p.W3,
            "block backward: no query-chunk scratch for {} tokens", N);
  const bool q_local = !holds_rows(a.qkv, N, size_t(p.W3)), out_local = !holds_rows(a.atty, N, size_t(p.W1));
  if (re.qkv)  // the K/V prefix (and a whole qkv)
    for (int j = 0; j <= last; ++j) {
      float* qkv = row_at(a.qkv, p.rc.begin(j), N, p.W3);
      qkv_chunk_forward(a, qkv, x, w, lin, p, j, s.C, o);
      store_kv(a.kv, qkv, p.rc.begin(j), p.rc.size(j), attention, layout, s.T, p.H, s.D());
    }
  const KvRows kv = kv_rows(a.qkv, a.kv, N, f, layout);
  observed(o, "memset.act_grads", 0, [&] { fill_zero(sc.dkv.data(), size_t(N) * size_t(layout.width())); });
  const MutKvRows dkv = layout.view(sc.dkv.data());
  // Two steps per chunk (model/domino.h): everything up to the qkv backward's start, then its finish
  // and ln1's backward; under Domino the next chunk's backward runs while the reduction is in flight.
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 2, p.interleave(), true, [&](int j, int k) {
    const int r = p.rc.begin(j), n = p.rc.size(j);
    float* dqkv = sc.dqkv.data();
    if (k == 0) {
      float* qkv = row_at(a.qkv, r, N, p.W3);
      if (q_local && j != last) qkv_chunk_forward(a, qkv, x, w, lin, p, j, s.C, o);
      if (re.attention || (out_local && j != last))
        attention_chunk_forward(a, qkv, kv, attention, p, s, j, o);
      float* datty = sc.datty.data();
      mlp_chunk_backward(dres, datty, a, x, w, g, lin, sc, p, j, s.C, o, re);
      observed(o, "memset.act_grads", 0, [&] { fill_zero(sc.dqkv.data(), size_t(n) * p.W3); });
      observed(o, "attention.bwd", 4.0 * p.H * double(n) * s.T * s.D(), [&] {
        attention.backward_chunk(dqkv, dkv, datty, row_at(a.atty, r, N, p.W1), row_at(a.lse, r, N, p.H), qkv,
                                 kv, r, n, s.T, p.H, s.D());
      });
    }
    // ln1 is current when the qkv recompute above (or the forward's last chunk) wrote it.
    qkv_chunk_backward_step(dres, dqkv, a, x, w, g, lin, sc, p, j, k, pending[size_t(j)], s.C, o,
                            !q_local && (re.cheap || re.token_local));
    if (k == 1) re.done_with_input(r, n);
  });
}

}  // namespace

void gpt2_block_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                        LinearOps& lin, Gpt2BlockScratch& scratch, const BlockShape& s, OpObserver* o) {
  const int N = s.N(), C = s.C;
  const Split p(lin, s);
  ODY_CHECK(
      a.fch_gelu.size() >= size_t(p.rc.chunk_rows()) * p.G * p.W4 && a.residual3.size() >= size_t(p.rc.N) * C,
      "block forward: activations for fewer than {} tokens (fch_gelu {} < {} or residual3 {} < {})", N,
      a.fch_gelu.size(), size_t(p.rc.chunk_rows()) * p.G * p.W4, a.residual3.size(), size_t(p.rc.N) * C);
  if (query_chunked(s, p, attention)) return chunked_forward(a, x, w, attention, lin, p, s, o);
  ODY_CHECK(a.atty.size() >= size_t(N) * p.W1, "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  for (int j = 0; j < p.rc.count(); ++j)
    qkv_chunk_forward(a, qkv + size_t(p.rc.begin(j)) * p.G * p.W3, x, w, lin, p, j, C, o);
  // QK^T and PV over the causal half, the whole sequence at once (this rank's heads).
  observed(o, "attention.fwd", 2.0 * s.B * p.H * double(s.T) * s.T * s.D(),
           [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, p.H, s.D(), a.attention); });
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 3, p.interleave(), false, [&](int j, int k) {
    mlp_chunk_step(a, a.residual3.data(), x, w, lin, p, j, k, pending[size_t(j)], C, o);
  });
}

void gpt2_block_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                         const Gpt2LayerTensors& g, AttentionOp& attention, LinearOps& lin,
                         Gpt2BlockScratch& sc, const BlockShape& s, OpObserver* o, const Recompute& re) {
  const int N = s.N(), C = s.C;
  const Split p(lin, s);
  ODY_CHECK(sc.dfch.size() >= size_t(p.rc.chunk_rows()) * p.G * p.W4 &&
                a.fch_gelu.size() >= size_t(p.rc.chunk_rows()) * p.G * p.W4 &&
                sc.dln.size() >= size_t(p.slots) * p.rc.chunk_rows() * C,
            "block backward: no backward scratch for {} tokens", N);
  if (query_chunked(s, p, attention))
    return chunked_backward(dres, a, x, w, g, attention, lin, sc, p, s, o, re);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc.qkv.data();
  if (re.qkv)
    for (int j = 0; j < p.rc.count(); ++j)
      qkv_chunk_forward(a, qkv + size_t(p.rc.begin(j)) * p.G * p.W3, x, w, lin, p, j, C, o);
  if (re.attention)
    observed(o, "attention.fwd", 2.0 * s.B * p.H * double(s.T) * s.T * s.D(),
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, p.H, s.D(), a.attention); });
  float* datty = sc.datty.data();
  float* dqkv = nullptr;
  std::vector<InFlight> pending(size_t(p.rc.count()));
  chunk_pipeline(p.rc.count(), 2, p.interleave(), false, [&](int j, int k) {
    mlp_chunk_backward_step(dres, datty + size_t(p.rc.begin(j)) * p.G * p.W1, a, x, w, g, lin, sc, p, j, k,
                            pending[size_t(j)], C, o, re);
  });
  // Attention over the whole sequence (key-outer: its gradient over the qkv).
  observed(o, "memset.act_grads", 0,
           [&] { dqkv = qkv_grad(qkv, sc.dqkv, size_t(N) * p.W3, s.query_chunks, attention); });
  observed(o, "attention.bwd", 4.0 * s.B * p.H * double(s.T) * s.T * s.D(), [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, p.H, s.D(), a.attention.get());
  });
  // qkv and ln1, chunk by chunk (ln1 recomputed when its buffer holds one chunk of several, or was
  // dropped by the cheap policy).
  const bool rerun_ln1 = re.cheap || (re.token_local && p.rc.count() > 1);
  chunk_pipeline(p.rc.count(), 2, p.interleave(), false, [&](int j, int k) {
    qkv_chunk_backward_step(dres, dqkv + size_t(p.rc.begin(j)) * p.G * p.W3, a, x, w, g, lin, sc, p, j, k,
                            pending[size_t(j)], C, o, rerun_ln1);
    if (k == 1) re.done_with_input(p.rc.begin(j), p.rc.size(j));  // the chunk's last read of x
  });
}

}  // namespace odyssey
