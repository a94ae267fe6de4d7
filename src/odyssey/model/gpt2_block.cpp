#include "odyssey/model/gpt2_block.h"

#include <algorithm>
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

namespace {
size_t rows_of(int rows, size_t N) {
  return rows < 0 ? N : std::min(size_t(rows), N);
}
}  // namespace

void Gpt2LayerActs::allocate(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model);
  const size_t S = rows_of(rows.stored, N), R = rows_of(rows.cheap, N), W = rows.sequence ? N : 0;
  fit(ln1, R * C), fit(ln1_mean, S), fit(ln1_rstd, S);
  fit(qkv, keep_qkv ? W * 3 * C : 0);
  fit(atty, W * C), fit(lse, rows.sequence ? size_t(B) * c.n_head * T : 0);
  fit(residual2, S * C);
  fit(ln2, R * C), fit(ln2_mean, S), fit(ln2_rstd, S);
  fit(fch, S * 4 * C), fit(fch_gelu, R * 4 * C);
  fit(residual3, rows.output ? N * C : 0);
  attention.reset();  // saved for another shape
}

size_t Gpt2LayerActs::bytes() const {
  size_t n = attention ? attention->bytes() : 0;
  for (const FloatBuffer* b : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &lse, &residual2, &ln2, &ln2_mean,
                               &ln2_rstd, &fch, &fch_gelu, &residual3})
    n += b->bytes();
  return n;
}

size_t Gpt2LayerActs::bytes_for(const ModelConfig& c, int B, int T, bool keep_qkv, const LayerRows& rows) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model);
  const size_t S = rows_of(rows.stored, N), R = rows_of(rows.cheap, N), W = rows.sequence ? N : 0;
  // Sequence-wide: atty [N, C], qkv [N, 3C], lse [B, H, T]; output residual3 [N, C]. Stored (S rows):
  // residual2 [S, C], fch [S, 4C], four [S] statistics. Cheap (R rows): ln1, ln2 [R, C], fch_gelu [R, 4C].
  return (W * C * (1 + (keep_qkv ? 3 : 0)) + (rows.sequence ? size_t(B) * c.n_head * T : 0) +
          (rows.output ? N * C : 0) + S * (5 * C + 4) + R * 6 * C) *
         sizeof(float);
}

void Gpt2LayerActs::swap_cheap(Gpt2LayerActs& o) {
  std::swap(ln1, o.ln1);
  std::swap(ln2, o.ln2);
  std::swap(fch_gelu, o.fch_gelu);
}

void Gpt2BlockScratch::allocate(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                int chunk) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model), b = backward ? 1 : 0;
  const size_t R = size_t(RowChunks{int(N), chunk}.chunk_rows());
  fit(qkv, shared_qkv ? N * 3 * C : 0);
  fit(datty, b * N * C), fit(dqkv, b * N * 3 * C);
  fit(dln, b * R * C), fit(dfch, b * R * 4 * C), fit(dfch_gelu, b * R * 4 * C);
}

size_t Gpt2BlockScratch::bytes() const {
  return qkv.bytes() + dln.bytes() + datty.bytes() + dqkv.bytes() + dfch.bytes() + dfch_gelu.bytes();
}

size_t Gpt2BlockScratch::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv, bool backward,
                                   int chunk) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model);
  const size_t R = size_t(RowChunks{int(N), chunk}.chunk_rows());
  return (N * C * ((shared_qkv ? 3 : 0) + (backward ? 1 + 3 : 0)) + (backward ? R * C * 9 : 0)) *
         sizeof(float);
}

Gpt2LayerTensors resolve_layer(const LayerParams& l, const std::function<float*(const ParamInfo&)>& at) {
  return {at(*l.ln1_w), at(*l.ln1_b), at(*l.qkv_w), at(*l.qkv_b), at(*l.attn_proj_w), at(*l.attn_proj_b),
          at(*l.ln2_w), at(*l.ln2_b), at(*l.fc_w),  at(*l.fc_b),  at(*l.fc_proj_w),   at(*l.fc_proj_b)};
}

namespace {

// Layer-norm 1 and the qkv projection of chunk j (qkv: the layer's [N, 3C]).
void qkv_chunk_forward(Gpt2LayerActs& a, float* qkv, const float* x, const Gpt2LayerTensors& w,
                       const RowChunks& rc, int j, int C, OpObserver* o) {
  const int r = rc.begin(j), n = rc.size(j), N = rc.N;
  float* ln1 = row_at(a.ln1, r, N, C);
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(ln1, row_at(a.ln1_mean, r, N, 1), row_at(a.ln1_rstd, r, N, 1), x + size_t(r) * C,
                      w.ln1_w, w.ln1_b, n, C);
  });
  observed(o, "gemm.fwd.qkv", 2.0 * n * double(C) * 3 * C,
           [&] { linear_forward(qkv + size_t(r) * 3 * C, ln1, w.qkv_w, w.qkv_b, n, C, 3 * C); });
}

// The rest of chunk j after the attention: residual2, ln2, fc and gelu, and with out (the layer's
// output [N, C]) the MLP's projection and residual3.
void mlp_chunk_forward(Gpt2LayerActs& a, float* out, const float* x, const Gpt2LayerTensors& w,
                       const RowChunks& rc, int j, int C, OpObserver* o) {
  const int r = rc.begin(j), n = rc.size(j), N = rc.N;
  const size_t nC = size_t(n) * C;
  float* residual2 = row_at(a.residual2, r, N, C);
  float* ln2 = row_at(a.ln2, r, N, C);
  float* fch = row_at(a.fch, r, N, 4 * C);
  float* fch_gelu = row_at(a.fch_gelu, r, N, 4 * C);
  auto lin_flops = [&](int in, int outc) { return 2.0 * n * double(in) * outc; };
  // residual2 = x + atty W_proj^T + b (the projection is written into residual2, then x added)
  observed(o, "gemm.fwd.attn_proj", lin_flops(C, C), [&] {
    linear_forward(residual2, a.atty.data() + size_t(r) * C, w.attn_proj_w, w.attn_proj_b, n, C, C);
  });
  observed(o, "residual.add", 0, [&] { accumulate(residual2, x + size_t(r) * C, nC); });
  observed(o, "layernorm.fwd", 0, [&] {
    layernorm_forward(ln2, row_at(a.ln2_mean, r, N, 1), row_at(a.ln2_rstd, r, N, 1), residual2, w.ln2_w,
                      w.ln2_b, n, C);
  });
  observed(o, "gemm.fwd.fc", lin_flops(C, 4 * C),
           [&] { linear_forward(fch, ln2, w.fc_w, w.fc_b, n, C, 4 * C); });
  observed(o, "gelu.fwd", 0, [&] { gelu_forward(fch_gelu, fch, 4 * nC); });
  if (!out) return;
  float* y = out + size_t(r) * C;
  observed(o, "gemm.fwd.fc_proj", lin_flops(4 * C, C),
           [&] { linear_forward(y, fch_gelu, w.fc_proj_w, w.fc_proj_b, n, 4 * C, C); });
  observed(o, "residual.add", 0, [&] { accumulate(y, residual2, nC); });
}

}  // namespace

void gpt2_block_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                        Gpt2BlockScratch& scratch, const BlockShape& s, OpObserver* o) {
  const int N = s.N(), C = s.C;
  const RowChunks rc{N, s.chunk};
  ODY_CHECK(a.fch_gelu.size() >= size_t(rc.chunk_rows()) * 4 * C && a.atty.size() >= size_t(N) * C &&
                a.residual3.size() >= size_t(N) * C,
            "block forward: activations for fewer than {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : scratch.qkv.data();
  for (int j = 0; j < rc.count(); ++j) qkv_chunk_forward(a, qkv, x, w, rc, j, C, o);
  // QK^T and PV over the causal half, the whole sequence at once.
  observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D(),
           [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D(), a.attention); });
  for (int j = 0; j < rc.count(); ++j) mlp_chunk_forward(a, a.residual3.data(), x, w, rc, j, C, o);
}

void gpt2_block_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                         const Gpt2LayerTensors& g, AttentionOp& attention, Gpt2BlockScratch& sc,
                         const BlockShape& s, OpObserver* o, const Recompute& re) {
  const int N = s.N(), C = s.C;
  const size_t NC = size_t(N) * C;
  const RowChunks rc{N, s.chunk};
  ODY_CHECK(sc.dfch.size() >= size_t(rc.chunk_rows()) * 4 * C &&
                a.fch_gelu.size() >= size_t(rc.chunk_rows()) * 4 * C,
            "block backward: no backward scratch for {} tokens", N);
  float* qkv = a.qkv.size() ? a.qkv.data() : sc.qkv.data();
  if (re.qkv)
    for (int j = 0; j < rc.count(); ++j) qkv_chunk_forward(a, qkv, x, w, rc, j, C, o);
  if (re.attention)
    observed(o, "attention.fwd", 2.0 * s.B * s.H * double(s.T) * s.T * s.D(),
             [&] { attention.forward(a.atty.data(), a.lse.data(), qkv, s.B, s.T, s.H, s.D(), a.attention); });
  float* datty = nullptr;
  float* dqkv = nullptr;
  observed(o, "memset.act_grads", 0, [&] { datty = zeroed(sc.datty, NC); });
  // MLP and attention projection, chunk by chunk: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))),
  // residual2 = x + proj(atty).
  for (int j = 0; j < rc.count(); ++j) {
    const int r = rc.begin(j), n = rc.size(j);
    const size_t nC = size_t(n) * C;
    float* ln2 = row_at(a.ln2, r, N, C);
    float* fch = row_at(a.fch, r, N, 4 * C);
    float* fch_gelu = row_at(a.fch_gelu, r, N, 4 * C);
    float* residual2 = row_at(a.residual2, r, N, C);
    float* ln2_mean = row_at(a.ln2_mean, r, N, 1);
    float* ln2_rstd = row_at(a.ln2_rstd, r, N, 1);
    if (re.token_local) mlp_chunk_forward(a, nullptr, x, w, rc, j, C, o);
    if (re.cheap) {  // the forward's own calls on the kept residual2 and fch
      observed(o, "layernorm.fwd", 0,
               [&] { layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w.ln2_w, w.ln2_b, n, C); });
      observed(o, "gelu.fwd", 0, [&] { gelu_forward(fch_gelu, fch, 4 * nC); });
    }
    float* dr = dres + size_t(r) * C;
    float *dfch_gelu = nullptr, *dfch = nullptr, *dln = nullptr;
    observed(o, "memset.act_grads", 0, [&] { dfch_gelu = zeroed(sc.dfch_gelu, 4 * nC); });
    linear_backward_observed(o, "gemm.dinp.fc_proj", "gemm.dweight.fc_proj", dfch_gelu, g.fc_proj_w,
                             g.fc_proj_b, dr, fch_gelu, w.fc_proj_w, n, 4 * C, C);
    observed(o, "memset.act_grads", 0, [&] { dfch = zeroed(sc.dfch, 4 * nC); });
    observed(o, "gelu.bwd", 0, [&] { gelu_backward(dfch, fch, dfch_gelu, 4 * nC); });
    observed(o, "memset.act_grads", 0, [&] { dln = zeroed(sc.dln, nC); });
    linear_backward_observed(o, "gemm.dinp.fc", "gemm.dweight.fc", dln, g.fc_w, g.fc_b, dfch, ln2, w.fc_w, n,
                             C, 4 * C);
    observed(o, "layernorm.bwd", 0, [&] {
      layernorm_backward(dr, g.ln2_w, g.ln2_b, dln, residual2, w.ln2_w, ln2_mean, ln2_rstd, n, C);
    });
    linear_backward_observed(o, "gemm.dinp.attn_proj", "gemm.dweight.attn_proj", datty + size_t(r) * C,
                             g.attn_proj_w, g.attn_proj_b, dr, a.atty.data() + size_t(r) * C, w.attn_proj_w,
                             n, C, C);
  }
  // Attention over the whole sequence.
  observed(o, "memset.act_grads", 0, [&] { dqkv = zeroed(sc.dqkv, 3 * NC); });
  observed(o, "attention.bwd", 4.0 * s.B * s.H * double(s.T) * s.T * s.D(), [&] {
    attention.backward(dqkv, datty, a.atty.data(), a.lse.data(), a.qkv.size() ? a.qkv.data() : nullptr, s.B,
                       s.T, s.H, s.D(), a.attention.get());
  });
  // qkv and ln1, chunk by chunk (ln1 recomputed when its buffer holds one chunk of several, or was
  // dropped by the cheap policy).
  const bool rerun_ln1 = re.cheap || (re.token_local && rc.count() > 1);
  for (int j = 0; j < rc.count(); ++j) {
    const int r = rc.begin(j), n = rc.size(j);
    const size_t nC = size_t(n) * C;
    float* dr = dres + size_t(r) * C;
    float* ln1 = row_at(a.ln1, r, N, C);
    float* ln1_mean = row_at(a.ln1_mean, r, N, 1);
    float* ln1_rstd = row_at(a.ln1_rstd, r, N, 1);
    float* dln = nullptr;
    if (rerun_ln1)
      observed(o, "layernorm.fwd", 0, [&] {
        layernorm_forward(ln1, ln1_mean, ln1_rstd, x + size_t(r) * C, w.ln1_w, w.ln1_b, n, C);
      });
    observed(o, "memset.act_grads", 0, [&] { dln = zeroed(sc.dln, nC); });
    linear_backward_observed(o, "gemm.dinp.qkv", "gemm.dweight.qkv", dln, g.qkv_w, g.qkv_b,
                             dqkv + size_t(r) * 3 * C, ln1, w.qkv_w, n, C, 3 * C);
    observed(o, "layernorm.bwd", 0, [&] {
      layernorm_backward(dr, g.ln1_w, g.ln1_b, dln, x + size_t(r) * C, w.ln1_w, ln1_mean, ln1_rstd, n, C);
    });
  }
}

}  // namespace odyssey
