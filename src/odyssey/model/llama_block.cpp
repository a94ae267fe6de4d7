#include "odyssey/model/llama_block.h"

#include <algorithm>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/linear.h"
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

// dinp += dout W, dweight += dout^T inp, each observed on its own (no biases in Llama).
void linear_backward_observed(OpObserver* o, const char* dinp_name, const char* dweight_name, float* dinp,
                              float* dweight, const float* dout, const float* inp, const float* weight, int N,
                              int C, int OC) {
  const double flops = 2.0 * N * double(C) * OC;
  observed(o, dinp_name, flops, [&] { linear_backward_input(dinp, dout, weight, N, C, OC); });
  observed(o, dweight_name, flops, [&] { linear_backward_weight(dweight, dout, inp, N, C, OC); });
}

}  // namespace

namespace {
size_t rows_of(int rows, size_t N) {
  return rows < 0 ? N : std::min(size_t(rows), N);
}
}  // namespace

void LlamaLayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  const size_t S = rows_of(rows.stored, N), R = rows_of(rows.cheap, N), W = rows.sequence ? N : 0;
  fit(an, R * C), fit(an_rstd, S);
  fit(qkv, keep_qkv ? W * size_t(s.qkv_width()) : 0);
  fit(atty, W * HD), fit(lse, rows.sequence ? size_t(B) * s.H * T : 0);
  fit(residual2, S * C);
  fit(bn, R * C), fit(bn_rstd, S);
  fit(gate_up, S * 2 * F), fit(h, R * F);
  fit(residual3, rows.output ? N * C : 0);
  attention.reset();
}

size_t LlamaLayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b :
       {&an, &an_rstd, &qkv, &atty, &lse, &residual2, &bn, &bn_rstd, &gate_up, &h, &residual3})
    n += b->bytes();
  return n;
}

size_t LlamaLayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  const size_t S = rows_of(rows.stored, N), R = rows_of(rows.cheap, N), W = rows.sequence ? N : 0;
  // Sequence-wide: qkv, atty [N, H D], lse [B, H, T]; output residual3 [N, C]. Stored (S rows):
  // residual2 [S, C], gate_up [S, 2F], two [S] statistics. Cheap (R rows): an, bn [R, C], h [R, F].
  return (W * ((keep_qkv ? size_t(s.qkv_width()) : 0) + HD) + (rows.sequence ? size_t(B) * s.H * T : 0) +
          (rows.output ? N * C : 0) + S * (C + 2 * F + 2) + R * (2 * C + F)) *
         sizeof(float);
}

void LlamaLayerActs::swap_cheap(LlamaLayerActs& o) {
  std::swap(an, o.an);
  std::swap(bn, o.bn);
  std::swap(h, o.h);
}

void LlamaBlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                 int chunk) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), b = backward ? 1 : 0, W = size_t(s.qkv_width());
  const size_t R = size_t(RowChunks{s.N(), chunk}.chunk_rows());
  fit(qkv, shared_qkv ? N * W : 0);
  fit(datty, b * N * std::max(size_t(s.C), size_t(s.H) * s.D)), fit(dqkv, b * N * W);
  fit(dnorm, b * R * size_t(s.C)), fit(dh, b * R * size_t(s.F)), fit(dgate_up, b * R * 2 * size_t(s.F));
}

size_t LlamaBlockScratch::bytes() const {
  return qkv.bytes() + dnorm.bytes() + datty.bytes() + dqkv.bytes() + dh.bytes() + dgate_up.bytes();
}

size_t LlamaBlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                    int chunk) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), W = size_t(s.qkv_width());
  const size_t R = size_t(RowChunks{s.N(), chunk}.chunk_rows());
  const size_t whole = backward ? std::max(size_t(s.C), size_t(s.H) * s.D) + W : 0;
  const size_t local = backward ? size_t(s.C) + 3 * size_t(s.F) : 0;
  return (N * ((shared_qkv ? W : 0) + whole) + R * local) * sizeof(float);
}

LlamaLayerTensors resolve_llama_layer(const LlamaLayerParams& l,
                                      const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.attn_norm), at(*l.q), at(*l.o), at(*l.mlp_norm), at(*l.gate), at(*l.down)};
}

namespace {

// RMSNorm, the qkv projection and RoPE of chunk j (qkv: the layer's [N, W]).
void qkv_chunk_forward(LlamaLayerActs& a, float* qkv, const float* x, const LlamaLayerTensors& w,
                       const LlamaShape& s, const RopeTables& rope, const RowChunks& rc, int j,
                       OpObserver* o) {
  const int r = rc.begin(j), n = rc.size(j), C = s.C, W = s.qkv_width(), HD = s.H * s.D;
  const size_t half = size_t(s.D) / 2;
  float* an = row_at(a.an, r, rc.N, C);
  float* q = qkv + size_t(r) * W;
  observed(o, "rmsnorm.fwd", 0, [&] {
    rmsnorm_forward(an, row_at(a.an_rstd, r, rc.N, 1), x + size_t(r) * C, w.attn_norm, n, C, s.eps);
  });
  observed(o, "gemm.fwd.qkv", 2.0 * n * double(C) * W,
           [&] { linear_forward(q, an, w.qkv_w, nullptr, n, C, W); });
  const float* cos = rope.cos + size_t(r) * half;
  const float* sin = rope.sin + size_t(r) * half;
  observed(o, "rope.fwd", 0, [&] {
    rope_forward(q, W, n, s.H, s.D, cos, sin);         // q heads
    rope_forward(q + HD, W, n, s.Hkv, s.D, cos, sin);  // k heads
  });
}

// The rest of chunk j after the attention: residual2, RMSNorm, gate|up and SwiGLU, and with out (the
// layer's output [N, C]) the down projection and residual3.
void mlp_chunk_forward(LlamaLayerActs& a, float* out, const float* x, const LlamaLayerTensors& w,
                       const LlamaShape& s, const RowChunks& rc, int j, OpObserver* o) {
  const int r = rc.begin(j), n = rc.size(j), C = s.C, HD = s.H * s.D, F = s.F;
  const size_t nC = size_t(n) * C;
  float* residual2 = row_at(a.residual2, r, rc.N, C);
  float* bn = row_at(a.bn, r, rc.N, C);
  float* gate_up = row_at(a.gate_up, r, rc.N, 2 * F);
  float* h = row_at(a.h, r, rc.N, F);
  auto lin_flops = [&](int in, int outc) { return 2.0 * n * double(in) * outc; };
  observed(o, "gemm.fwd.attn_proj", lin_flops(HD, C),
           [&] { linear_forward(residual2, a.atty.data() + size_t(r) * HD, w.o_w, nullptr, n, HD, C); });
  observed(o, "residual.add", 0, [&] { accumulate(residual2, x + size_t(r) * C, nC); });
  observed(o, "rmsnorm.fwd", 0,
           [&] { rmsnorm_forward(bn, row_at(a.bn_rstd, r, rc.N, 1), residual2, w.mlp_norm, n, C, s.eps); });
  observed(o, "gemm.fwd.gate_up", lin_flops(C, 2 * F),
           [&] { linear_forward(gate_up, bn, w.gate_up_w, nullptr, n, C, 2 * F); });
  observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(h, gate_up, n, F); });
  if (!out) return;
  float* y = out + size_t(r) * C;
  observed(o, "gemm.fwd.down", lin_flops(F, C), [&] { linear_forward(y, h, w.down_w, nullptr, n, F, C); });
  observed(o, "residual.add", 0, [&] { accumulate(y, residual2, nC); });
}

}  // namespace

void llama_block_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                         AttentionOp& attention, LlamaBlockScratch& scratch, const LlamaShape& s,
                         const RopeTables& rope, OpObserver* o) {
  const int N = s.N();
  const RowChunks rc{N, s.chunk};
  ODY_CHECK(a.h.size() >= size_t(rc.chunk_rows()) * s.F && a.residual3.size() >= size_t(N) * s.C,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  for (int j = 0; j < rc.count(); ++j) qkv_chunk_forward(a, qkv, x, w, s, rope, rc, j, o);
  observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
           [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  for (int j = 0; j < rc.count(); ++j) mlp_chunk_forward(a, a.residual3.data(), x, w, s, rc, j, o);
}

void llama_block_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                          const LlamaLayerTensors& g, AttentionOp& attention, LlamaBlockScratch& sc,
                          const LlamaShape& s, const RopeTables& rope, OpObserver* o, const Recompute& re) {
  const int N = s.N(), C = s.C, W = s.qkv_width(), HD = s.H * s.D, F = s.F;
  const RowChunks rc{N, s.chunk};
  const size_t half = size_t(s.D) / 2;
  ODY_CHECK(
      sc.dgate_up.size() >= size_t(rc.chunk_rows()) * 2 * F && a.h.size() >= size_t(rc.chunk_rows()) * F,
      "block backward: no backward scratch for {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc.qkv.data();
  if (re.qkv)
    for (int j = 0; j < rc.count(); ++j) qkv_chunk_forward(a, qkv, x, w, s, rope, rc, j, o);
  if (re.attention)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  float *datty = nullptr, *dqkv = nullptr;
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, size_t(N) * HD); });
  // MLP and output projection, chunk by chunk: residual3 = residual2 + down(swiglu(gate_up(rmsnorm(
  // residual2)))), residual2 = x + o_proj(atty).
  for (int j = 0; j < rc.count(); ++j) {
    const int r = rc.begin(j), n = rc.size(j);
    const size_t nC = size_t(n) * C;
    float* residual2 = row_at(a.residual2, r, N, C);
    float* bn = row_at(a.bn, r, N, C);
    float* bn_rstd = row_at(a.bn_rstd, r, N, 1);
    float* gate_up = row_at(a.gate_up, r, N, 2 * F);
    float* h = row_at(a.h, r, N, F);
    if (re.token_local) mlp_chunk_forward(a, nullptr, x, w, s, rc, j, o);
    if (re.cheap) {  // the forward's own calls on the kept residual2 and gate_up
      observed(o, "rmsnorm.fwd", 0,
               [&] { rmsnorm_forward(bn, bn_rstd, residual2, w.mlp_norm, n, C, s.eps); });
      observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(h, gate_up, n, F); });
    }
    float* dr = dres + size_t(r) * C;
    float *dh = nullptr, *dnorm = nullptr;
    float* dgate_up = sc.dgate_up.data();
    observed(o, "memset.act_grads", 0, [&] { dh = zeroed(sc.dh, size_t(n) * F); });
    linear_backward_observed(o, "gemm.dinp.down", "gemm.dweight.down", dh, g.down_w, dr, h, w.down_w, n, F,
                             C);
    observed(o, "swiglu.bwd", 0, [&] { swiglu_backward(dgate_up, dh, gate_up, n, F); });
    observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, nC); });
    linear_backward_observed(o, "gemm.dinp.gate_up", "gemm.dweight.gate_up", dnorm, g.gate_up_w, dgate_up, bn,
                             w.gate_up_w, n, C, 2 * F);
    observed(o, "rmsnorm.bwd", 0,
             [&] { rmsnorm_backward(dr, g.mlp_norm, dnorm, residual2, w.mlp_norm, bn_rstd, n, C); });
    linear_backward_observed(o, "gemm.dinp.attn_proj", "gemm.dweight.attn_proj", datty + size_t(r) * HD,
                             g.o_w, dr, a.atty.data() + size_t(r) * HD, w.o_w, n, HD, C);
  }
  // Attention over the whole sequence.
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, size_t(N) * W); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D, [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D, a.attention.get());
  });
  // RoPE, qkv and RMSNorm, chunk by chunk (the norm recomputed when its buffer holds one chunk of
  // several, or was dropped by the cheap policy).
  const bool rerun_norm = re.cheap || (re.token_local && rc.count() > 1);
  for (int j = 0; j < rc.count(); ++j) {
    const int r = rc.begin(j), n = rc.size(j);
    const size_t nC = size_t(n) * C;
    float* an = row_at(a.an, r, N, C);
    float* an_rstd = row_at(a.an_rstd, r, N, 1);
    float* dr = dres + size_t(r) * C;
    float* dq = dqkv + size_t(r) * W;
    float* dnorm = nullptr;
    const float* cos = rope.cos + size_t(r) * half;
    const float* sin = rope.sin + size_t(r) * half;
    observed(o, "rope.bwd", 0, [&] {
      rope_backward(dq, W, n, s.H, s.D, cos, sin);
      rope_backward(dq + HD, W, n, s.Hkv, s.D, cos, sin);
    });
    if (rerun_norm)
      observed(o, "rmsnorm.fwd", 0,
               [&] { rmsnorm_forward(an, an_rstd, x + size_t(r) * C, w.attn_norm, n, C, s.eps); });
    observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, nC); });
    linear_backward_observed(o, "gemm.dinp.qkv", "gemm.dweight.qkv", dnorm, g.qkv_w, dq, an, w.qkv_w, n, C,
                             W);
    observed(o, "rmsnorm.bwd", 0, [&] {
      rmsnorm_backward(dr, g.attn_norm, dnorm, x + size_t(r) * C, w.attn_norm, an_rstd, n, C);
    });
  }
}

}  // namespace odyssey
