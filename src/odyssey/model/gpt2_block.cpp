#include "odyssey/model/gpt2_block.h"

#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {

namespace {

void fit(FloatBuffer& b, size_t n) {
  if (b.size() != n) b.resize(n);
}

// The first n floats of b, zeroed (b may be larger: buffers sized for a longer context).
float* zeroed(FloatBuffer& b, size_t n) {
  std::memset(b.data(), 0, n * sizeof(float));
  return b.data();
}

// linear_backward as its three pieces, each observed on its own (named for the profile's kinds).
void linear_backward_observed(OpObserver* o, const char* dinp_name, const char* dweight_name, float* dinp,
                              float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, int N, int C, int OC) {
  const double flops = 2.0 * N * double(C) * OC;
  observed(o, dinp_name, flops, [&] { linear_backward_input(dinp, dout, weight, N, C, OC); });
  observed(o, dweight_name, flops, [&] { linear_backward_weight(dweight, dout, inp, N, C, OC); });
  observed(o, "bias_grad.colsum", 0, [&] { linear_backward_bias(dbias, dout, N, OC); });
}

}  // namespace

void Gpt2LayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model);
  fit(ln1, N * C), fit(ln1_mean, N), fit(ln1_rstd, N);
  fit(qkv, keep_qkv ? N * 3 * C : 0);
  fit(atty, N * C), fit(lse, size_t(B) * c.n_head * T);
  fit(residual2, N * C);
  fit(ln2, N * C), fit(ln2_mean, N), fit(ln2_rstd, N);
  fit(fch, N * 4 * C), fit(fch_gelu, N * 4 * C);
  fit(residual3, N * C);
  attention.reset();  // saved for another shape
}

size_t Gpt2LayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &lse, &residual2, &ln2, &ln2_mean,
                               &ln2_rstd, &fch, &fch_gelu, &residual3})
    n += b->bytes();
  return n;
}

size_t Gpt2LayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model);
  // ln1, atty, residual2, ln2, residual3 [N, C]; qkv [N, 3C]; fch, fch_gelu [N, 4C]; four [N]
  // statistics; lse [B, H, T].
  return (N * C * (5 + (keep_qkv ? 3 : 0) + 8) + 4 * N + size_t(B) * c.n_head * T) * sizeof(float);
}

void Gpt2BlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model), b = backward ? 1 : 0;
  fit(qkv, shared_qkv ? N * 3 * C : 0);
  fit(dln, b * N * C), fit(datty, b * N * C), fit(dqkv, b * N * 3 * C);
  fit(dfch, b * N * 4 * C), fit(dfch_gelu, b * N * 4 * C);
}

size_t Gpt2BlockScratch::bytes() const {
  return qkv.bytes() + dln.bytes() + datty.bytes() + dqkv.bytes() + dfch.bytes() + dfch_gelu.bytes();
}

size_t Gpt2BlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model);
  return N * C * ((shared_qkv ? 3 : 0) + (backward ? 1 + 1 + 3 + 8 : 0)) * sizeof(float);
}

Gpt2LayerTensors resolve_layer(const LayerParams& l, const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.ln1_w), at(*l.ln1_b), at(*l.qkv_w), at(*l.qkv_b), at(*l.attn_proj_w), at(*l.attn_proj_b),
          at(*l.ln2_w), at(*l.ln2_b), at(*l.fc_w),  at(*l.fc_b),  at(*l.fc_proj_w),   at(*l.fc_proj_b)};
}

void gpt2_block_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                        Gpt2BlockScratch& scratch, const BlockShape& s, OpObserver* o, bool attention_kept) {
  const int N = s.N(), C = s.C;
  const size_t NC = size_t(N) * C;
  ODY_CHECK(a.ln1.size() >= NC && a.fch.size() >= 4 * NC,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  auto lin_flops = [&](int in, int out) { return 2.0 * N * double(in) * out; };
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, w.ln1_w, w.ln1_b, N, C);
  });
  observed(o, "gemm.fwd.qkv", lin_flops(C, 3 * C),
           [&] { linear_forward(qkv, a.ln1.data(), w.qkv_w, w.qkv_b, N, C, 3 * C); });
  // QK^T and PV over the causal half.
  if (!attention_kept)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D(),
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D(), a.attention); });
  // residual2 = x + atty W_proj^T + b (the projection is written into residual2, then x added)
  observed(o, "gemm.fwd.attn_proj", lin_flops(C, C),
           [&] { linear_forward(a.residual2.data(), a.atty.data(), w.attn_proj_w, w.attn_proj_b, N, C, C); });
  observed(o, "residual.add", 0, [&] { accumulate(a.residual2.data(), x, NC); });
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), w.ln2_w,
                      w.ln2_b, N, C);
  });
  observed(o, "gemm.fwd.fc", lin_flops(C, 4 * C),
           [&] { linear_forward(a.fch.data(), a.ln2.data(), w.fc_w, w.fc_b, N, C, 4 * C); });
  observed(o, "gelu.fwd", 0, [&] { gelu_forward(a.fch_gelu.data(), a.fch.data(), 4 * NC); });
  observed(o, "gemm.fwd.fc_proj", lin_flops(4 * C, C), [&] {
    linear_forward(a.residual3.data(), a.fch_gelu.data(), w.fc_proj_w, w.fc_proj_b, N, 4 * C, C);
  });
  observed(o, "residual.add", 0, [&] { accumulate(a.residual3.data(), a.residual2.data(), NC); });
}

void gpt2_block_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                         const Gpt2LayerTensors& g, AttentionOp& attention, Gpt2BlockScratch& sc,
                         const BlockShape& s, OpObserver* o) {
  const int N = s.N(), C = s.C;
  const size_t NC = size_t(N) * C;
  ODY_CHECK(sc.dfch.size() >= 4 * NC, "block backward: no backward scratch for {} tokens", N);
  float* dfch_gelu = nullptr;
  float* dfch = nullptr;
  float* dln = nullptr;
  float* datty = nullptr;
  float* dqkv = nullptr;
  // MLP: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))).
  observed(o, "memset.act_grads", 0, [&] { dfch_gelu = zeroed(sc.dfch_gelu, 4 * NC); });
  linear_backward_observed(o, "gemm.dinp.fc_proj", "gemm.dweight.fc_proj", dfch_gelu, g.fc_proj_w,
                           g.fc_proj_b, dres, a.fch_gelu.data(), w.fc_proj_w, N, 4 * C, C);
  observed(o, "memset.act_grads", 0, [&] { dfch = zeroed(sc.dfch, 4 * NC); });
  observed(o, "gelu.bwd", 0, [&] { gelu_backward(dfch, a.fch.data(), dfch_gelu, 4 * NC); });
  observed(o, "memset.act_grads", 0, [&] { dln = zeroed(sc.dln, NC); });
  linear_backward_observed(o, "gemm.dinp.fc", "gemm.dweight.fc", dln, g.fc_w, g.fc_b, dfch, a.ln2.data(),
                           w.fc_w, N, C, 4 * C);
  observed(o, "layernorm.bwd", 0, [&] {
    layernorm_backward(dres, g.ln2_w, g.ln2_b, dln, a.residual2.data(), w.ln2_w, a.ln2_mean.data(),
                       a.ln2_rstd.data(), N, C);
  });
  // Attention: residual2 = x + proj(attn(qkv(ln1(x)))).
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, NC); });
  linear_backward_observed(o, "gemm.dinp.attn_proj", "gemm.dweight.attn_proj", datty, g.attn_proj_w,
                           g.attn_proj_b, dres, a.atty.data(), w.attn_proj_w, N, C, C);
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, 3 * NC); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D(), [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D(), a.attention.get());
  });
  observed(o, "memset.act_grads", 0, [&] { dln = zeroed(sc.dln, NC); });
  linear_backward_observed(o, "gemm.dinp.qkv", "gemm.dweight.qkv", dln, g.qkv_w, g.qkv_b, dqkv, a.ln1.data(),
                           w.qkv_w, N, C, 3 * C);
  observed(o, "layernorm.bwd", 0, [&] {
    layernorm_backward(dres, g.ln1_w, g.ln1_b, dln, x, w.ln1_w, a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
  });
}

}  // namespace odyssey
