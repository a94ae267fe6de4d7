#include "odyssey/model/llama_block.h"

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

LlamaShape LlamaShape::of(const ModelConfig& c, int B, int T, const TpSplit& tp) {
  const int t = tp.t, H = c.n_head, K = c.kv_heads(), F = c.ffn_dim();
  ODY_CHECK(H % t == 0, "model.n_head = {} does not split over parallel.tp = {}", H, t);
  ODY_CHECK(K % t == 0 || t % K == 0,
            "model.n_kv_head = {} and parallel.tp = {}: one must divide the other (key/value heads are split "
            "when tp divides them, replicated when they divide tp)",
            K, t);
  ODY_CHECK(F % t == 0, "model.d_ff = {} does not split over parallel.tp = {}", F, t);
  return {B, T, c.d_model, H / t, K % t == 0 ? K / t : 1, c.head_dim(), F / t, float(c.rms_norm_eps)};
}

void LlamaLayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, tp);
  const size_t N = size_t(s.N()), R = size_t(tp.rows(s.N())), C = size_t(s.C), F = size_t(s.F),
               HD = size_t(s.H) * s.D;
  fit(an, R * C), fit(an_rstd, R);
  fit(qkv, keep_qkv ? N * size_t(s.qkv_width()) : 0);
  fit(atty, N * HD), fit(lse, size_t(B) * s.H * T);
  fit(residual2, R * C);
  fit(bn, R * C), fit(bn_rstd, R);
  fit(gate_up, N * 2 * F), fit(h, N * F);
  fit(residual3, R * C);
  attention.reset();
}

size_t LlamaLayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b :
       {&an, &an_rstd, &qkv, &atty, &lse, &residual2, &bn, &bn_rstd, &gate_up, &h, &residual3})
    n += b->bytes();
  return n;
}

size_t LlamaLayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, tp);
  const size_t N = size_t(s.N()), R = size_t(tp.rows(s.N())), C = size_t(s.C), F = size_t(s.F),
               HD = size_t(s.H) * s.D;
  // an, residual2, bn, residual3 [R, C]; qkv; atty [N, H D]; gate_up [N, 2F], h [N, F]; two [R]
  // statistics; lse [B, H, T] (this rank's heads and features).
  return (R * C * 4 + (keep_qkv ? N * size_t(s.qkv_width()) : 0) + N * HD + N * F * 3 + 2 * R +
          size_t(B) * s.H * T) *
         sizeof(float);
}

void LlamaBlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                 const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, tp);
  const size_t N = size_t(s.N()), R = size_t(tp.rows(s.N())), b = backward ? 1 : 0, W = size_t(s.qkv_width());
  fit(qkv, shared_qkv ? N * W : 0);
  fit(dnorm, b * R * size_t(s.C)), fit(datty, b * N * size_t(s.H) * s.D), fit(dqkv, b * N * W);
  fit(dh, b * N * size_t(s.F)), fit(dgate_up, b * N * 2 * size_t(s.F));
}

size_t LlamaBlockScratch::bytes() const {
  return qkv.bytes() + dnorm.bytes() + datty.bytes() + dqkv.bytes() + dh.bytes() + dgate_up.bytes();
}

size_t LlamaBlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                    const TpSplit& tp) {
  const LlamaShape s = LlamaShape::of(c, B, T, tp);
  const size_t N = size_t(s.N()), R = size_t(tp.rows(s.N())), W = size_t(s.qkv_width());
  const size_t back = backward ? size_t(s.H) * s.D + W + 3 * size_t(s.F) : 0;
  return (N * ((shared_qkv ? W : 0) + back) + (backward ? R * size_t(s.C) : 0)) * sizeof(float);
}

LlamaLayerTensors resolve_llama_layer(const LlamaLayerParams& l,
                                      const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.attn_norm), at(*l.q), at(*l.o), at(*l.mlp_norm), at(*l.gate), at(*l.down)};
}

void llama_block_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                         AttentionOp& attention, LinearOps& lin, LlamaBlockScratch& scratch,
                         const LlamaShape& s, const RopeTables& rope, OpObserver* o, bool attention_kept) {
  const int N = s.N(), C = s.C, W = s.qkv_width(), HD = s.H * s.D;
  const int64_t R = lin.rows(N);  // residual-stream rows held: all N, or the TP-SP slice
  const size_t RC = size_t(R) * C;
  ODY_CHECK(a.an.size() >= RC && a.h.size() >= size_t(N) * s.F,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  observed(o, "rmsnorm.fwd", 0,
           [&] { rmsnorm_forward(a.an.data(), a.an_rstd.data(), x, w.attn_norm, int(R), C, s.eps); });
  lin.column_forward(qkv, a.an.data(), w.qkv_w, nullptr, {N, C, W, "qkv", o});
  observed(o, "rope.fwd", 0, [&] {
    rope_forward(qkv, W, N, s.H, s.D, rope.cos, rope.sin);         // q heads
    rope_forward(qkv + HD, W, N, s.Hkv, s.D, rope.cos, rope.sin);  // k heads
  });
  if (!attention_kept)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  lin.row_forward(a.residual2.data(), a.atty.data(), w.o_w, nullptr, {N, HD, C, "attn_proj", o});
  observed(o, "residual.add", 0, [&] { accumulate(a.residual2.data(), x, RC); });
  observed(o, "rmsnorm.fwd", 0, [&] {
    rmsnorm_forward(a.bn.data(), a.bn_rstd.data(), a.residual2.data(), w.mlp_norm, int(R), C, s.eps);
  });
  lin.column_forward(a.gate_up.data(), a.bn.data(), w.gate_up_w, nullptr, {N, C, 2 * s.F, "gate_up", o});
  observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(a.h.data(), a.gate_up.data(), N, s.F); });
  lin.row_forward(a.residual3.data(), a.h.data(), w.down_w, nullptr, {N, s.F, C, "down", o});
  observed(o, "residual.add", 0, [&] { accumulate(a.residual3.data(), a.residual2.data(), RC); });
}

void llama_block_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                          const LlamaLayerTensors& g, AttentionOp& attention, LinearOps& lin,
                          LlamaBlockScratch& sc, const LlamaShape& s, const RopeTables& rope, OpObserver* o) {
  const int N = s.N(), C = s.C, W = s.qkv_width(), HD = s.H * s.D, F = s.F;
  const int64_t R = lin.rows(N);
  const size_t RC = size_t(R) * C;
  ODY_CHECK(sc.dgate_up.size() >= size_t(N) * 2 * F, "block backward: no backward scratch for {} tokens", N);
  float *dh = nullptr, *dnorm = nullptr, *datty = nullptr, *dqkv = nullptr;
  float* dgate_up = sc.dgate_up.data();
  // MLP: residual3 = residual2 + down(swiglu(gate_up(rmsnorm(residual2)))).
  observed(o, "memset.act_grads", 0, [&] { dh = zeroed(sc.dh, size_t(N) * F); });
  lin.row_backward(dh, g.down_w, nullptr, dres, a.h.data(), w.down_w, {N, F, C, "down", o});
  observed(o, "swiglu.bwd", 0, [&] { swiglu_backward(dgate_up, dh, a.gate_up.data(), N, F); });
  observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, RC); });
  lin.column_backward(dnorm, g.gate_up_w, nullptr, dgate_up, a.bn.data(), w.gate_up_w,
                      {N, C, 2 * F, "gate_up", o});
  observed(o, "rmsnorm.bwd", 0, [&] {
    rmsnorm_backward(dres, g.mlp_norm, dnorm, a.residual2.data(), w.mlp_norm, a.bn_rstd.data(), int(R), C);
  });
  // Attention: residual2 = x + o_proj(attention(rope(qkv(rmsnorm(x))))).
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, size_t(N) * HD); });
  lin.row_backward(datty, g.o_w, nullptr, dres, a.atty.data(), w.o_w, {N, HD, C, "attn_proj", o});
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, size_t(N) * W); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D, [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D, a.attention.get());
  });
  observed(o, "rope.bwd", 0, [&] {
    rope_backward(dqkv, W, N, s.H, s.D, rope.cos, rope.sin);
    rope_backward(dqkv + HD, W, N, s.Hkv, s.D, rope.cos, rope.sin);
  });
  observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, RC); });
  lin.column_backward(dnorm, g.qkv_w, nullptr, dqkv, a.an.data(), w.qkv_w, {N, C, W, "qkv", o});
  observed(o, "rmsnorm.bwd", 0,
           [&] { rmsnorm_backward(dres, g.attn_norm, dnorm, x, w.attn_norm, a.an_rstd.data(), int(R), C); });
}

}  // namespace odyssey
