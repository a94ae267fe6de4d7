#include "odyssey/model/gpt2_block.h"

#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/layernorm.h"

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

}  // namespace

void Gpt2LayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const TpSplit& tp) {
  const size_t N = size_t(B) * T, R = size_t(tp.rows(N)), C = size_t(c.d_model), t = size_t(tp.t);
  fit(ln1, R * C), fit(ln1_mean, R), fit(ln1_rstd, R);
  fit(qkv, keep_qkv ? N * 3 * C / t : 0);
  fit(atty, N * C / t), fit(lse, size_t(B) * c.n_head / t * T);
  fit(residual2, R * C);
  fit(ln2, R * C), fit(ln2_mean, R), fit(ln2_rstd, R);
  fit(fch, N * 4 * C / t), fit(fch_gelu, N * 4 * C / t);
  fit(residual3, R * C);
  attention.reset();  // saved for another shape
}

size_t Gpt2LayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &lse, &residual2, &ln2, &ln2_mean,
                               &ln2_rstd, &fch, &fch_gelu, &residual3})
    n += b->bytes();
  return n;
}

size_t Gpt2LayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const TpSplit& tp) {
  const size_t N = size_t(B) * T, R = size_t(tp.rows(N)), C = size_t(c.d_model), t = size_t(tp.t);
  // ln1, residual2, ln2, residual3 [R, C] and four [R] statistics; atty [N, C/t]; qkv [N, 3C/t];
  // fch, fch_gelu [N, 4C/t]; lse [B, H/t, T].
  return (R * C * 4 + 4 * R + N * C / t * (1 + (keep_qkv ? 3 : 0) + 8) + size_t(B) * c.n_head / t * T) *
         sizeof(float);
}

void Gpt2BlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                const TpSplit& tp) {
  const size_t N = size_t(B) * T, R = size_t(tp.rows(N)), C = size_t(c.d_model), t = size_t(tp.t);
  const size_t b = backward ? 1 : 0;
  fit(qkv, shared_qkv ? N * 3 * C / t : 0);
  fit(dln, b * R * C), fit(datty, b * N * C / t), fit(dqkv, b * N * 3 * C / t);
  fit(dfch, b * N * 4 * C / t), fit(dfch_gelu, b * N * 4 * C / t);
}

size_t Gpt2BlockScratch::bytes() const {
  return qkv.bytes() + dln.bytes() + datty.bytes() + dqkv.bytes() + dfch.bytes() + dfch_gelu.bytes();
}

size_t Gpt2BlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                   const TpSplit& tp) {
  const size_t N = size_t(B) * T, R = size_t(tp.rows(N)), C = size_t(c.d_model), t = size_t(tp.t);
  return (N * C / t * ((shared_qkv ? 3 : 0) + (backward ? 1 + 3 + 8 : 0)) + (backward ? R * C : 0)) *
         sizeof(float);
}

Gpt2LayerTensors resolve_layer(const LayerParams& l, const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.ln1_w), at(*l.ln1_b), at(*l.qkv_w), at(*l.qkv_b), at(*l.attn_proj_w), at(*l.attn_proj_b),
          at(*l.ln2_w), at(*l.ln2_b), at(*l.fc_w),  at(*l.fc_b),  at(*l.fc_proj_w),   at(*l.fc_proj_b)};
}

void gpt2_block_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                        LinearOps& lin, Gpt2BlockScratch& scratch, const BlockShape& s, OpObserver* o,
                        bool attention_kept) {
  // Under tensor parallelism this rank runs H/t heads and 4C/t MLP features of all N tokens, and
  // holds R = rows(N) tokens of the residual stream (all N, or its TP-SP slice).
  const int t = lin.tp(), N = s.N(), C = s.C, H = s.H / t, D = s.D();
  const int64_t R = lin.rows(N);
  const size_t RC = size_t(R) * C, NC = size_t(N) * C;
  ODY_CHECK(a.ln1.size() >= RC && a.fch.size() >= 4 * NC / t,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, w.ln1_w, w.ln1_b, int(R), C);
  });
  lin.column_forward(qkv, a.ln1.data(), w.qkv_w, w.qkv_b, {N, C, 3 * C / t, "qkv", o});
  // QK^T and PV over the causal half.
  if (!attention_kept)
    observed(o, "attention.fwd", 2.0 * s.B * H * double(s.T) * s.T * D,
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, H, D, a.attention); });
  // residual2 = x + atty W_proj^T + b (the projection is written into residual2, then x added)
  lin.row_forward(a.residual2.data(), a.atty.data(), w.attn_proj_w, w.attn_proj_b,
                  {N, C / t, C, "attn_proj", o});
  observed(o, "residual.add", 0, [&] { accumulate(a.residual2.data(), x, RC); });
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), w.ln2_w,
                      w.ln2_b, int(R), C);
  });
  lin.column_forward(a.fch.data(), a.ln2.data(), w.fc_w, w.fc_b, {N, C, 4 * C / t, "fc", o});
  observed(o, "gelu.fwd", 0, [&] { gelu_forward(a.fch_gelu.data(), a.fch.data(), 4 * NC / t); });
  lin.row_forward(a.residual3.data(), a.fch_gelu.data(), w.fc_proj_w, w.fc_proj_b,
                  {N, 4 * C / t, C, "fc_proj", o});
  observed(o, "residual.add", 0, [&] { accumulate(a.residual3.data(), a.residual2.data(), RC); });
}

void gpt2_block_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                         const Gpt2LayerTensors& g, AttentionOp& attention, LinearOps& lin,
                         Gpt2BlockScratch& sc, const BlockShape& s, OpObserver* o) {
  const int t = lin.tp(), N = s.N(), C = s.C, H = s.H / t, D = s.D();
  const int64_t R = lin.rows(N);
  const size_t RC = size_t(R) * C, NC = size_t(N) * C;
  ODY_CHECK(sc.dfch.size() >= 4 * NC / t, "block backward: no backward scratch for {} tokens", N);
  float* dfch_gelu = nullptr;
  float* dfch = nullptr;
  float* dln = nullptr;
  float* datty = nullptr;
  float* dqkv = nullptr;
  // MLP: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))).
  observed(o, "memset.act_grads", 0, [&] { dfch_gelu = zeroed(sc.dfch_gelu, 4 * NC / t); });
  lin.row_backward(dfch_gelu, g.fc_proj_w, g.fc_proj_b, dres, a.fch_gelu.data(), w.fc_proj_w,
                   {N, 4 * C / t, C, "fc_proj", o});
  observed(o, "memset.act_grads", 0, [&] { dfch = zeroed(sc.dfch, 4 * NC / t); });
  observed(o, "gelu.bwd", 0, [&] { gelu_backward(dfch, a.fch.data(), dfch_gelu, 4 * NC / t); });
  observed(o, "memset.act_grads", 0, [&] { dln = zeroed(sc.dln, RC); });
  lin.column_backward(dln, g.fc_w, g.fc_b, dfch, a.ln2.data(), w.fc_w, {N, C, 4 * C / t, "fc", o});
  observed(o, "layernorm.bwd", 0, [&] {
    layernorm_backward(dres, g.ln2_w, g.ln2_b, dln, a.residual2.data(), w.ln2_w, a.ln2_mean.data(),
                       a.ln2_rstd.data(), int(R), C);
  });
  // Attention: residual2 = x + proj(attn(qkv(ln1(x)))).
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, NC / t); });
  lin.row_backward(datty, g.attn_proj_w, g.attn_proj_b, dres, a.atty.data(), w.attn_proj_w,
                   {N, C / t, C, "attn_proj", o});
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, 3 * NC / t); });
  observed(o, "attention.bwd", 4.0 * s.B * H * double(s.T) * s.T * D, [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, H, D, a.attention.get());
  });
  observed(o, "memset.act_grads", 0, [&] { dln = zeroed(sc.dln, RC); });
  lin.column_backward(dln, g.qkv_w, g.qkv_b, dqkv, a.ln1.data(), w.qkv_w, {N, C, 3 * C / t, "qkv", o});
  observed(o, "layernorm.bwd", 0, [&] {
    layernorm_backward(dres, g.ln1_w, g.ln1_b, dln, x, w.ln1_w, a.ln1_mean.data(), a.ln1_rstd.data(), int(R),
                       C);
  });
}

}  // namespace odyssey
