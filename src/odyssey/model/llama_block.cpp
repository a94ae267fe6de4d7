#include "odyssey/model/llama_block.h"

#include <algorithm>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/rmsnorm.h"
#include "odyssey/kernels/rope.h"
#include "odyssey/kernels/swiglu.h"

namespace odyssey {

namespace {

void fit(FloatBuffer& b, size_t n) {
  if (b.size() != n) b.resize(n);
}

float* zeroed(FloatBuffer& b, size_t n) {
  std::memset(b.data(), 0, n * sizeof(float));
  return b.data();
}

}  // namespace

namespace {
size_t rows_of(int rows, size_t N) {
  return rows < 0 ? N : std::min(size_t(rows), N);
}
}  // namespace

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

// Under tensor parallelism a layer holds Rn = rows(N) residual-stream rows (all N, or the TP-SP
// slice) and G = N / Rn token rows of the projections per residual row (see Gpt2LayerActs): the
// stored and cheap groups count residual rows, their wide buffers (gate_up, h) G times as many token
// rows of this rank's F/t features; the sequence-wide ones hold its heads for all N tokens.
void LlamaLayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                              const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, 0, tp);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  const size_t Rn = size_t(tp.rows(s.N())), G = N / Rn;
  const size_t S = rows_of(rows.stored, Rn), R = rows_of(rows.cheap, Rn), W = rows.sequence ? N : 0;
  fit(an, R * C), fit(an_rstd, S);
  fit(qkv, keep_qkv ? W * size_t(s.qkv_width()) : 0);
  fit(atty, W * HD), fit(lse, rows.sequence ? size_t(B) * s.H * T : 0);
  fit(residual2, S * C);
  fit(bn, R * C), fit(bn_rstd, S);
  fit(gate_up, S * G * 2 * F), fit(h, R * G * F);
  fit(residual3, rows.output ? Rn * C : 0);
  attention.reset();
}

size_t LlamaLayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b :
       {&an, &an_rstd, &qkv, &atty, &lse, &residual2, &bn, &bn_rstd, &gate_up, &h, &residual3})
    n += b->bytes();
  return n;
}

size_t LlamaLayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows,
                                 const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, 0, tp);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  const size_t Rn = size_t(tp.rows(s.N())), G = N / Rn;
  const size_t S = rows_of(rows.stored, Rn), R = rows_of(rows.cheap, Rn), W = rows.sequence ? N : 0;
  // Sequence-wide: qkv, atty [N, H D], lse [B, H, T]; output residual3 [Rn, C]. Stored (S rows):
  // residual2 [S, C], two [S] statistics, gate_up [S G, 2F]. Cheap (R rows): an, bn [R, C], h [R G, F].
  return (W * ((keep_qkv ? size_t(s.qkv_width()) : 0) + HD) + (rows.sequence ? size_t(B) * s.H * T : 0) +
          (rows.output ? Rn * C : 0) + S * (C + G * 2 * F + 2) + R * (2 * C + G * F)) *
         sizeof(float);
}

void LlamaLayerActs::swap_cheap(LlamaLayerActs& o) {
  std::swap(an, o.an);
  std::swap(bn, o.bn);
  std::swap(h, o.h);
}

void LlamaBlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                 int chunk, const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, 0, tp);
  const size_t N = size_t(s.N()), b = backward ? 1 : 0, W = size_t(s.qkv_width());
  const size_t Rn = size_t(tp.rows(s.N())), G = N / Rn, R = size_t(RowChunks{int(Rn), chunk}.chunk_rows());
  fit(qkv, shared_qkv ? N * W : 0);
  fit(datty, b * N * std::max(size_t(s.C), size_t(s.H) * s.D)), fit(dqkv, b * N * W);
  fit(dnorm, b * R * size_t(s.C)), fit(dh, b * R * G * size_t(s.F)),
      fit(dgate_up, b * R * G * 2 * size_t(s.F));
}

size_t LlamaBlockScratch::bytes() const {
  return qkv.bytes() + dnorm.bytes() + datty.bytes() + dqkv.bytes() + dh.bytes() + dgate_up.bytes();
}

size_t LlamaBlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                    int chunk, const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, 0, tp);
  const size_t N = size_t(s.N()), W = size_t(s.qkv_width());
  const size_t Rn = size_t(tp.rows(s.N())), G = N / Rn, R = size_t(RowChunks{int(Rn), chunk}.chunk_rows());
  const size_t whole = backward ? std::max(size_t(s.C), size_t(s.H) * s.D) + W : 0;
  const size_t local = backward ? size_t(s.C) + G * 3 * size_t(s.F) : 0;
  return (N * ((shared_qkv ? W : 0) + whole) + R * local) * sizeof(float);
}

LlamaLayerTensors resolve_llama_layer(const LlamaLayerParams& l,
                                      const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.attn_norm), at(*l.q), at(*l.o), at(*l.mlp_norm), at(*l.gate), at(*l.down)};
}

namespace {

// The residual stream's rows in chunks and the token rows of the projections per residual row (G:
// tp under TP-SP, else 1).
struct Rows {
  RowChunks rc;
  int G;
  Rows(const LinearOps& lin, const LlamaShape& s) : rc{int(lin.rows(s.N())), s.chunk}, G(s.N() / rc.N) {
    // A TP-SP chunk would gather rows from every rank's slice, not one contiguous token range.
    ODY_CHECK(
        !lin.sequence_parallel() || rc.count() <= 1,
        "sequence-chunked layers (memory.chunk_tokens) are not supported with TP-SP yet: {} rows per rank "
        "in chunks of {}",
        rc.N, rc.chunk_rows());
  }
};

// RMSNorm, the qkv projection and RoPE of chunk j (qkv: the layer's [N, W]).
void qkv_chunk_forward(LlamaLayerActs& a, float* qkv, const float* x, const LlamaLayerTensors& w,
                       LinearOps& lin, const LlamaShape& s, const RopeTables& rope, const Rows& p, int j,
                       OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), gr = r * p.G, gn = n * p.G, C = s.C, W = s.qkv_width(),
            HD = s.H * s.D;
  const size_t half = size_t(s.D) / 2;
  float* an = row_at(a.an, r, p.rc.N, C);
  float* q = qkv + size_t(gr) * W;
  observed(o, "rmsnorm.fwd", 0, [&] {
    rmsnorm_forward(an, row_at(a.an_rstd, r, p.rc.N, 1), x + size_t(r) * C, w.attn_norm, n, C, s.eps);
  });
  lin.column_forward(q, an, w.qkv_w, nullptr, {gn, C, W, "qkv", o});
  const float* cos = rope.cos + size_t(gr) * half;
  const float* sin = rope.sin + size_t(gr) * half;
  observed(o, "rope.fwd", 0, [&] {
    rope_forward(q, W, gn, s.H, s.D, cos, sin);         // q heads
    rope_forward(q + HD, W, gn, s.Hkv, s.D, cos, sin);  // k heads
  });
}

// The rest of chunk j after the attention: residual2, RMSNorm, gate|up and SwiGLU, and with out (the
// layer's output [R, C]) the down projection and residual3.
void mlp_chunk_forward(LlamaLayerActs& a, float* out, const float* x, const LlamaLayerTensors& w,
                       LinearOps& lin, const LlamaShape& s, const Rows& p, int j, OpObserver* o) {
  const int r = p.rc.begin(j), n = p.rc.size(j), gn = n * p.G, C = s.C, HD = s.H * s.D, F = s.F, R = p.rc.N;
  const size_t nC = size_t(n) * C;
  float* residual2 = row_at(a.residual2, r, R, C);
  float* bn = row_at(a.bn, r, R, C);
  float* gate_up = row_at(a.gate_up, r, R, size_t(p.G) * 2 * F);
  float* h = row_at(a.h, r, R, size_t(p.G) * F);
  lin.row_forward(residual2, a.atty.data() + size_t(r) * p.G * HD, w.o_w, nullptr,
                  {gn, HD, C, "attn_proj", o});
  observed(o, "residual.add", 0, [&] { accumulate(residual2, x + size_t(r) * C, nC); });
  observed(o, "rmsnorm.fwd", 0,
           [&] { rmsnorm_forward(bn, row_at(a.bn_rstd, r, R, 1), residual2, w.mlp_norm, n, C, s.eps); });
  lin.column_forward(gate_up, bn, w.gate_up_w, nullptr, {gn, C, 2 * F, "gate_up", o});
  observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(h, gate_up, gn, F); });
  if (!out) return;
  float* y = out + size_t(r) * C;
  lin.row_forward(y, h, w.down_w, nullptr, {gn, F, C, "down", o});
  observed(o, "residual.add", 0, [&] { accumulate(y, residual2, nC); });
}

}  // namespace

void llama_block_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                         AttentionOp& attention, LinearOps& lin, LlamaBlockScratch& scratch,
                         const LlamaShape& s, const RopeTables& rope, OpObserver* o) {
  const int N = s.N();
  const Rows p(lin, s);
  ODY_CHECK(a.h.size() >= size_t(p.rc.chunk_rows()) * p.G * s.F && a.residual3.size() >= size_t(p.rc.N) * s.C,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  for (int j = 0; j < p.rc.count(); ++j) qkv_chunk_forward(a, qkv, x, w, lin, s, rope, p, j, o);
  observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
           [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  for (int j = 0; j < p.rc.count(); ++j) mlp_chunk_forward(a, a.residual3.data(), x, w, lin, s, p, j, o);
}

void llama_block_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                          const LlamaLayerTensors& g, AttentionOp& attention, LinearOps& lin,
                          LlamaBlockScratch& sc, const LlamaShape& s, const RopeTables& rope, OpObserver* o,
                          const Recompute& re) {
  const int N = s.N(), C = s.C, W = s.qkv_width(), HD = s.H * s.D, F = s.F;
  const Rows p(lin, s);
  const int R = p.rc.N;
  const size_t half = size_t(s.D) / 2;
  ODY_CHECK(sc.dgate_up.size() >= size_t(p.rc.chunk_rows()) * p.G * 2 * F &&
                a.h.size() >= size_t(p.rc.chunk_rows()) * p.G * F,
            "block backward: no backward scratch for {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc.qkv.data();
  if (re.qkv)
    for (int j = 0; j < p.rc.count(); ++j) qkv_chunk_forward(a, qkv, x, w, lin, s, rope, p, j, o);
  if (re.attention)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  float *datty = nullptr, *dqkv = nullptr;
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, size_t(N) * HD); });
  // MLP and output projection, chunk by chunk: residual3 = residual2 + down(swiglu(gate_up(rmsnorm(
  // residual2)))), residual2 = x + o_proj(atty).
  for (int j = 0; j < p.rc.count(); ++j) {
    const int r = p.rc.begin(j), n = p.rc.size(j), gn = n * p.G;
    const size_t nC = size_t(n) * C;
    float* residual2 = row_at(a.residual2, r, R, C);
    float* bn = row_at(a.bn, r, R, C);
    float* bn_rstd = row_at(a.bn_rstd, r, R, 1);
    float* gate_up = row_at(a.gate_up, r, R, size_t(p.G) * 2 * F);
    float* h = row_at(a.h, r, R, size_t(p.G) * F);
    if (re.token_local) mlp_chunk_forward(a, nullptr, x, w, lin, s, p, j, o);
    if (re.cheap) {  // the forward's own calls on the kept residual2 and gate_up
      observed(o, "rmsnorm.fwd", 0,
               [&] { rmsnorm_forward(bn, bn_rstd, residual2, w.mlp_norm, n, C, s.eps); });
      observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(h, gate_up, gn, F); });
    }
    float* dr = dres + size_t(r) * C;
    float *dh = nullptr, *dnorm = nullptr;
    float* dgate_up = sc.dgate_up.data();
    observed(o, "memset.act_grads", 0, [&] { dh = zeroed(sc.dh, size_t(gn) * F); });
    lin.row_backward(dh, g.down_w, nullptr, dr, h, w.down_w, {gn, F, C, "down", o});
    observed(o, "swiglu.bwd", 0, [&] { swiglu_backward(dgate_up, dh, gate_up, gn, F); });
    observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, nC); });
    lin.column_backward(dnorm, g.gate_up_w, nullptr, dgate_up, bn, w.gate_up_w, {gn, C, 2 * F, "gate_up", o});
    observed(o, "rmsnorm.bwd", 0,
             [&] { rmsnorm_backward(dr, g.mlp_norm, dnorm, residual2, w.mlp_norm, bn_rstd, n, C); });
    lin.row_backward(datty + size_t(r) * p.G * HD, g.o_w, nullptr, dr, a.atty.data() + size_t(r) * p.G * HD,
                     w.o_w, {gn, HD, C, "attn_proj", o});
  }
  // Attention over the whole sequence.
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, size_t(N) * W); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D, [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D, a.attention.get());
  });
  // RoPE, qkv and RMSNorm, chunk by chunk (the norm recomputed when its buffer holds one chunk of
  // several, or was dropped by the cheap policy).
  const bool rerun_norm = re.cheap || (re.token_local && p.rc.count() > 1);
  for (int j = 0; j < p.rc.count(); ++j) {
    const int r = p.rc.begin(j), n = p.rc.size(j), gr = r * p.G, gn = n * p.G;
    const size_t nC = size_t(n) * C;
    float* an = row_at(a.an, r, R, C);
    float* an_rstd = row_at(a.an_rstd, r, R, 1);
    float* dr = dres + size_t(r) * C;
    float* dq = dqkv + size_t(gr) * W;
    float* dnorm = nullptr;
    const float* cos = rope.cos + size_t(gr) * half;
    const float* sin = rope.sin + size_t(gr) * half;
    observed(o, "rope.bwd", 0, [&] {
      rope_backward(dq, W, gn, s.H, s.D, cos, sin);
      rope_backward(dq + HD, W, gn, s.Hkv, s.D, cos, sin);
    });
    if (rerun_norm)
      observed(o, "rmsnorm.fwd", 0,
               [&] { rmsnorm_forward(an, an_rstd, x + size_t(r) * C, w.attn_norm, n, C, s.eps); });
    observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, nC); });
    lin.column_backward(dnorm, g.qkv_w, nullptr, dq, an, w.qkv_w, {gn, C, W, "qkv", o});
    observed(o, "rmsnorm.bwd", 0, [&] {
      rmsnorm_backward(dr, g.attn_norm, dnorm, x + size_t(r) * C, w.attn_norm, an_rstd, n, C);
    });
  }
}

}  // namespace odyssey
