#include "odyssey/model/llama_block.h"

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

void LlamaLayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  fit(an, N * C), fit(an_rstd, N);
  fit(qkv, keep_qkv ? N * size_t(s.qkv_width()) : 0);
  fit(atty, N * HD), fit(lse, size_t(B) * s.H * T);
  fit(residual2, N * C);
  fit(bn, N * C), fit(bn_rstd, N);
  fit(gate_up, N * 2 * F), fit(h, N * F);
  fit(residual3, N * C);
  attention.reset();
}

size_t LlamaLayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b :
       {&an, &an_rstd, &qkv, &atty, &lse, &residual2, &bn, &bn_rstd, &gate_up, &h, &residual3})
    n += b->bytes();
  return n;
}

size_t LlamaLayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), C = size_t(s.C), F = size_t(s.F), HD = size_t(s.H) * s.D;
  // an, residual2, bn, residual3 [N, C]; qkv; atty [N, H D]; gate_up [N, 2F], h [N, F]; two [N]
  // statistics; lse [B, H, T].
  return (N * C * 4 + (keep_qkv ? N * size_t(s.qkv_width()) : 0) + N * HD + N * F * 3 + 2 * N +
          size_t(B) * s.H * T) *
         sizeof(float);
}

void LlamaBlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), b = backward ? 1 : 0, W = size_t(s.qkv_width());
  fit(qkv, shared_qkv ? N * W : 0);
  fit(dnorm, b * N * size_t(s.C)), fit(datty, b * N * size_t(s.H) * s.D), fit(dqkv, b * N * W);
  fit(dh, b * N * size_t(s.F)), fit(dgate_up, b * N * 2 * size_t(s.F));
}

size_t LlamaBlockScratch::bytes() const {
  return qkv.bytes() + dnorm.bytes() + datty.bytes() + dqkv.bytes() + dh.bytes() + dgate_up.bytes();
}

size_t LlamaBlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward) {
  const LlamaShape s = LlamaShape::of(c, B, T);
  const size_t N = size_t(s.N()), W = size_t(s.qkv_width());
  const size_t back = backward ? size_t(s.C) + size_t(s.H) * s.D + W + 3 * size_t(s.F) : 0;
  return N * ((shared_qkv ? W : 0) + back) * sizeof(float);
}

LlamaLayerTensors resolve_llama_layer(const LlamaLayerParams& l,
                                      const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.attn_norm), at(*l.q), at(*l.o), at(*l.mlp_norm), at(*l.gate), at(*l.down)};
}

void llama_block_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                         AttentionOp& attention, LlamaBlockScratch& scratch, const LlamaShape& s,
                         const RopeTables& rope, OpObserver* o, bool attention_kept) {
  const int N = s.N(), C = s.C, W = s.qkv_width(), HD = s.H * s.D;
  const size_t NC = size_t(N) * C;
  ODY_CHECK(a.an.size() >= NC && a.h.size() >= size_t(N) * s.F,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  auto lin_flops = [&](int in, int out) { return 2.0 * N * double(in) * out; };
  observed(o, "rmsnorm.fwd", 0,
           [&] { rmsnorm_forward(a.an.data(), a.an_rstd.data(), x, w.attn_norm, N, C, s.eps); });
  observed(o, "gemm.fwd.qkv", lin_flops(C, W),
           [&] { linear_forward(qkv, a.an.data(), w.qkv_w, nullptr, N, C, W); });
  observed(o, "rope.fwd", 0, [&] {
    rope_forward(qkv, W, N, s.H, s.D, rope.cos, rope.sin);         // q heads
    rope_forward(qkv + HD, W, N, s.Hkv, s.D, rope.cos, rope.sin);  // k heads
  });
  if (!attention_kept)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D,
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D, a.attention); });
  observed(o, "gemm.fwd.attn_proj", lin_flops(HD, C),
           [&] { linear_forward(a.residual2.data(), a.atty.data(), w.o_w, nullptr, N, HD, C); });
  observed(o, "residual.add", 0, [&] { accumulate(a.residual2.data(), x, NC); });
  observed(o, "rmsnorm.fwd", 0, [&] {
    rmsnorm_forward(a.bn.data(), a.bn_rstd.data(), a.residual2.data(), w.mlp_norm, N, C, s.eps);
  });
  observed(o, "gemm.fwd.gate_up", lin_flops(C, 2 * s.F),
           [&] { linear_forward(a.gate_up.data(), a.bn.data(), w.gate_up_w, nullptr, N, C, 2 * s.F); });
  observed(o, "swiglu.fwd", 0, [&] { swiglu_forward(a.h.data(), a.gate_up.data(), N, s.F); });
  observed(o, "gemm.fwd.down", lin_flops(s.F, C),
           [&] { linear_forward(a.residual3.data(), a.h.data(), w.down_w, nullptr, N, s.F, C); });
  observed(o, "residual.add", 0, [&] { accumulate(a.residual3.data(), a.residual2.data(), NC); });
}

void llama_block_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                          const LlamaLayerTensors& g, AttentionOp& attention, LlamaBlockScratch& sc,
                          const LlamaShape& s, const RopeTables& rope, OpObserver* o) {
  const int N = s.N(), C = s.C, W = s.qkv_width(), HD = s.H * s.D, F = s.F;
  const size_t NC = size_t(N) * C;
  ODY_CHECK(sc.dgate_up.size() >= size_t(N) * 2 * F, "block backward: no backward scratch for {} tokens", N);
  float *dh = nullptr, *dnorm = nullptr, *datty = nullptr, *dqkv = nullptr;
  float* dgate_up = sc.dgate_up.data();
  // MLP: residual3 = residual2 + down(swiglu(gate_up(rmsnorm(residual2)))).
  observed(o, "memset.act_grads", 0, [&] { dh = zeroed(sc.dh, size_t(N) * F); });
  linear_backward_observed(o, "gemm.dinp.down", "gemm.dweight.down", dh, g.down_w, dres, a.h.data(), w.down_w,
                           N, F, C);
  observed(o, "swiglu.bwd", 0, [&] { swiglu_backward(dgate_up, dh, a.gate_up.data(), N, F); });
  observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, NC); });
  linear_backward_observed(o, "gemm.dinp.gate_up", "gemm.dweight.gate_up", dnorm, g.gate_up_w, dgate_up,
                           a.bn.data(), w.gate_up_w, N, C, 2 * F);
  observed(o, "rmsnorm.bwd", 0, [&] {
    rmsnorm_backward(dres, g.mlp_norm, dnorm, a.residual2.data(), w.mlp_norm, a.bn_rstd.data(), N, C);
  });
  // Attention: residual2 = x + o_proj(attention(rope(qkv(rmsnorm(x))))).
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, size_t(N) * HD); });
  linear_backward_observed(o, "gemm.dinp.attn_proj", "gemm.dweight.attn_proj", datty, g.o_w, dres,
                           a.atty.data(), w.o_w, N, HD, C);
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, size_t(N) * W); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D, [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D, a.attention.get());
  });
  observed(o, "rope.bwd", 0, [&] {
    rope_backward(dqkv, W, N, s.H, s.D, rope.cos, rope.sin);
    rope_backward(dqkv + HD, W, N, s.Hkv, s.D, rope.cos, rope.sin);
  });
  observed(o, "memset.act_grads", 0, [&] { dnorm = zeroed(sc.dnorm, NC); });
  linear_backward_observed(o, "gemm.dinp.qkv", "gemm.dweight.qkv", dnorm, g.qkv_w, dqkv, a.an.data(), w.qkv_w,
                           N, C, W);
  observed(o, "rmsnorm.bwd", 0,
           [&] { rmsnorm_backward(dres, g.attn_norm, dnorm, x, w.attn_norm, a.an_rstd.data(), N, C); });
}

}  // namespace odyssey
