#include "odyssey/model/gpt2.h"

#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/cross_entropy.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {

// --- attention over the fused qkv buffer ---------------------------------------------------------

// q, k and v are strided views into qkv [B, T, 3C]: row stride 3C, offsets 0, C, 2C.
static void qkv_views(const float* qkv, int T, int C, HeadsView* q, HeadsView* k, HeadsView* v) {
  int64_t bs = int64_t(T) * 3 * C, rs = 3 * C;
  *q = {qkv, bs, rs};
  *k = {qkv + C, bs, rs};
  *v = {qkv + 2 * C, bs, rs};
}

void LocalAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D) {
  int C = H * D;
  HeadsView q, k, v;
  qkv_views(qkv, T, C, &q, &k, &v);
  attention_forward({out, int64_t(T) * C, C}, lse, q, k, v, {B, T, T, H, H, D}, {MaskKind::causal, 0, 0},
                    1.0f / std::sqrt(float(D)));
}

void LocalAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                              const float* qkv, int B, int T, int H, int D) {
  int C = H * D;
  HeadsView q, k, v;
  qkv_views(qkv, T, C, &q, &k, &v);
  int64_t bs = int64_t(T) * 3 * C, rs = 3 * C;
  attention_backward({dqkv, bs, rs}, {dqkv + C, bs, rs}, {dqkv + 2 * C, bs, rs}, {dout, int64_t(T) * C, C},
                     {out, int64_t(T) * C, C}, lse, q, k, v, {B, T, T, H, H, D}, {MaskKind::causal, 0, 0},
                     1.0f / std::sqrt(float(D)));
}

// --- activations ---------------------------------------------------------------------------------

void Activations::allocate(const ModelConfig& c, int B_, int T_, bool shared_qkv_) {
  if (B == B_ && T == T_ && shared_qkv == shared_qkv_) return;
  B = B_;
  T = T_;
  shared_qkv = shared_qkv_;
  const size_t N = size_t(B) * T, C = c.d_model, L = c.n_layer;
  auto per_layer = [&](std::vector<FloatBuffer>& v, size_t n) {
    v.clear();
    v.resize(L);
    for (auto& b : v) b.resize(n);
  };
  encoded.resize(N * C);
  per_layer(ln1, N * C);
  per_layer(ln1_mean, N);
  per_layer(ln1_rstd, N);
  per_layer(qkv, N * 3 * C);
  if (shared_qkv) qkv.resize(1);
  per_layer(atty, N * C);
  per_layer(att_lse, size_t(B) * c.n_head * T);
  per_layer(residual2, N * C);
  per_layer(ln2, N * C);
  per_layer(ln2_mean, N);
  per_layer(ln2_rstd, N);
  per_layer(fch, N * 4 * C);
  per_layer(fch_gelu, N * 4 * C);
  per_layer(residual3, N * C);
  lnf.resize(N * C);
  lnf_mean.resize(N);
  lnf_rstd.resize(N);
  logits.resize(N * size_t(c.vocab_size));
  losses.resize(N);
  tokens.resize(N);
  targets.resize(N);
  positions.resize(N);
  dres.resize(N * C);
  dln.resize(N * C);
  datty.resize(N * C);
  dqkv.resize(N * 3 * C);
  dfch.resize(N * 4 * C);
  dfch_gelu.resize(N * 4 * C);
}

size_t Activations::bytes() const {
  size_t total = encoded.bytes() + lnf.bytes() + lnf_mean.bytes() + lnf_rstd.bytes() + logits.bytes() +
                 losses.bytes() + tokens.bytes() + targets.bytes() + positions.bytes() + dres.bytes() +
                 dln.bytes() + datty.bytes() + dqkv.bytes() + dfch.bytes() + dfch_gelu.bytes();
  for (auto* v : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &att_lse, &residual2, &ln2, &ln2_mean, &ln2_rstd,
                  &fch, &fch_gelu, &residual3})
    for (const auto& b : *v) total += b.bytes();
  return total;
}

size_t Activations::bytes_for(const ModelConfig& c, int B, int T, bool shared_qkv) {
  const size_t N = size_t(B) * T, C = c.d_model, L = c.n_layer, H = c.n_head;
  // Per layer: ln1, atty, residual2, ln2, residual3 [N, C]; qkv [N, 3C] (unless shared); fch, fch_gelu
  // [N, 4C]; four [N] statistics; att_lse [B, H, T].
  const size_t per_layer = N * C * (5 + (shared_qkv ? 0 : 3) + 8) + 4 * N + size_t(B) * H * T;
  // encoded, lnf, dres, dln, datty [N, C]; dqkv [N, 3C]; dfch, dfch_gelu [N, 4C]; lnf stats and
  // losses [N]; logits [N, V].
  const size_t floats =
      L * per_layer + N * C * (5 + 3 + 8) + 3 * N + N * size_t(c.vocab_size) + (shared_qkv ? N * 3 * C : 0);
  return floats * sizeof(float) + 3 * N * sizeof(int32_t);  // tokens, targets, positions
}

// --- the model -----------------------------------------------------------------------------------

GPT2::GPT2(const ModelConfig& config, bool allocate_storage) : config_(config), table_(config) {
  config_.validate();
  unit_params_.assign(size_t(table_.num_units()), nullptr);
  unit_grads_.assign(size_t(table_.num_units()), nullptr);
  if (!allocate_storage) return;
  params_.resize(size_t(table_.total()));
  grads_.resize(size_t(table_.total()));
  for (int u = 0; u < table_.num_units(); ++u)
    set_unit_storage(u, params_.data() + table_.unit_begin(u), grads_.data() + table_.unit_begin(u));
}

void GPT2::set_unit_storage(int unit, float* params, float* grads) {
  unit_params_[size_t(unit)] = params;
  unit_grads_[size_t(unit)] = grads;
}

void GPT2::run_forward(const int* inputs, const int* targets, const int* positions, int B, int T) {
  const ModelConfig& c = config_;
  ODY_CHECK(B > 0 && T > 0, "forward: empty batch (B={}, T={})", B, T);
  ODY_CHECK(T <= c.seq_len, "sequence length {} exceeds the model's context model.seq_len={}", T, c.seq_len);
  acts_.allocate(c, B, T, attention_->saves_qkv());
  const int N = B * T, C = c.d_model, H = c.n_head, D = c.head_dim(), V = c.vocab_size;
  Activations& a = acts_;
  for (int i = 0; i < N; ++i) {
    ODY_CHECK(inputs[i] >= 0 && inputs[i] < V,
              "token id {} at row {}, position {} is outside the vocabulary [0, {})", inputs[i], i / T, i % T,
              V);
    int pos = positions ? positions[i % T] : i % T;
    ODY_CHECK(pos >= 0 && pos < c.seq_len, "position {} outside the model's context {}", pos, c.seq_len);
    a.tokens[size_t(i)] = inputs[i];
    a.positions[size_t(i)] = pos;
    a.targets[size_t(i)] = targets ? targets[i] : -1;
  }
  auto w = [this](const ParamInfo* t) { return param(*t); };
  hooks_->before_forward(0);
  embedding_forward(a.encoded.data(), a.tokens.data(), a.positions.data(), w(&table_.wte()), w(&table_.wpe()),
                    N, C);
  hooks_->after_forward(0);
  for (int l = 0; l < c.n_layer; ++l) {
    hooks_->before_forward(ParamTable::layer_unit(l));
    const LayerParams& lp = table_.layer(l);
    const float* x = l == 0 ? a.encoded.data() : a.residual3[size_t(l) - 1].data();
    size_t L = size_t(l);
    layernorm_forward(a.ln1[L].data(), a.ln1_mean[L].data(), a.ln1_rstd[L].data(), x, w(lp.ln1_w),
                      w(lp.ln1_b), N, C);
    linear_forward(a.qkv_of(L), a.ln1[L].data(), w(lp.qkv_w), w(lp.qkv_b), N, C, 3 * C);
    attention_->forward(a.atty[L].data(), a.att_lse[L].data(), a.qkv_of(L), B, T, H, D);
    // residual2 = x + atty W_proj^T + b (the projection is written into residual2, then x added)
    linear_forward(a.residual2[L].data(), a.atty[L].data(), w(lp.attn_proj_w), w(lp.attn_proj_b), N, C, C);
    accumulate(a.residual2[L].data(), x, size_t(N) * C);
    layernorm_forward(a.ln2[L].data(), a.ln2_mean[L].data(), a.ln2_rstd[L].data(), a.residual2[L].data(),
                      w(lp.ln2_w), w(lp.ln2_b), N, C);
    linear_forward(a.fch[L].data(), a.ln2[L].data(), w(lp.fc_w), w(lp.fc_b), N, C, 4 * C);
    gelu_forward(a.fch_gelu[L].data(), a.fch[L].data(), size_t(N) * 4 * C);
    linear_forward(a.residual3[L].data(), a.fch_gelu[L].data(), w(lp.fc_proj_w), w(lp.fc_proj_b), N, 4 * C,
                   C);
    accumulate(a.residual3[L].data(), a.residual2[L].data(), size_t(N) * C);
    hooks_->after_forward(ParamTable::layer_unit(l));
  }
  hooks_->before_forward(table_.final_unit());
  layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), a.residual3.back().data(),
                    w(&table_.lnf_w()), w(&table_.lnf_b()), N, C);
  hooks_->after_forward(table_.final_unit());
  // Tied LM head: logits = lnf wte^T.
  hooks_->before_forward(0);
  linear_forward(a.logits.data(), a.lnf.data(), w(&table_.wte()), nullptr, N, C, V);
  hooks_->after_forward(0);
}

static double sum_losses(const Activations& a, int N, int64_t* count) {
  double sum = 0;
  int64_t n = 0;
  for (int i = 0; i < N; ++i)
    if (a.targets[size_t(i)] >= 0) sum += a.losses[size_t(i)], ++n;
  if (count) *count = n;
  return sum;
}

double GPT2::forward(const int* inputs, const int* targets, const int* positions, int B, int T,
                     int64_t* count) {
  run_forward(inputs, targets, positions, B, T);
  const int N = B * T;
  cross_entropy_forward(acts_.losses.data(), acts_.logits.data(), acts_.targets.data(), N,
                        config_.vocab_size);
  return sum_losses(acts_, N, count);
}

double GPT2::forward_backward(const int* inputs, const int* targets, const int* positions, int B, int T,
                              float dloss, int64_t* count) {
  run_forward(inputs, targets, positions, B, T);
  const int N = B * T;
  cross_entropy_forward_backward(acts_.logits.data(), acts_.losses.data(), acts_.targets.data(), N,
                                 config_.vocab_size, dloss);
  double sum = sum_losses(acts_, N, count);
  run_backward();
  return sum;
}

void GPT2::run_backward() {
  const ModelConfig& c = config_;
  Activations& a = acts_;
  const int B = a.B, T = a.T, N = B * T, C = c.d_model, H = c.n_head, D = c.head_dim(), V = c.vocab_size;
  auto w = [this](const ParamInfo* t) { return param(*t); };
  auto d = [this](const ParamInfo* t) { return grad(*t); };

  // LM head (tied): dlnf = dlogits wte; dwte += dlogits^T lnf.
  hooks_->before_backward(0);
  a.dln.zero();
  linear_backward(a.dln.data(), d(&table_.wte()), nullptr, a.logits.data(), a.lnf.data(), w(&table_.wte()), N,
                  C, V);
  hooks_->before_backward(table_.final_unit());
  a.dres.zero();
  layernorm_backward(a.dres.data(), d(&table_.lnf_w()), d(&table_.lnf_b()), a.dln.data(),
                     a.residual3.back().data(), w(&table_.lnf_w()), a.lnf_mean.data(), a.lnf_rstd.data(), N,
                     C);
  hooks_->after_backward(table_.final_unit());
  // dres carries d(residual stream) down through the layers.
  for (int l = c.n_layer - 1; l >= 0; --l) {
    hooks_->before_backward(ParamTable::layer_unit(l));
    const LayerParams& lp = table_.layer(l);
    size_t L = size_t(l);
    const float* x = l == 0 ? a.encoded.data() : a.residual3[L - 1].data();
    // MLP: residual3 = residual2 + fc_proj(gelu(fc(ln2(residual2)))).
    a.dfch_gelu.zero();
    linear_backward(a.dfch_gelu.data(), d(lp.fc_proj_w), d(lp.fc_proj_b), a.dres.data(), a.fch_gelu[L].data(),
                    w(lp.fc_proj_w), N, 4 * C, C);
    a.dfch.zero();
    gelu_backward(a.dfch.data(), a.fch[L].data(), a.dfch_gelu.data(), size_t(N) * 4 * C);
    a.dln.zero();
    linear_backward(a.dln.data(), d(lp.fc_w), d(lp.fc_b), a.dfch.data(), a.ln2[L].data(), w(lp.fc_w), N, C,
                    4 * C);
    layernorm_backward(a.dres.data(), d(lp.ln2_w), d(lp.ln2_b), a.dln.data(), a.residual2[L].data(),
                       w(lp.ln2_w), a.ln2_mean[L].data(), a.ln2_rstd[L].data(), N, C);
    // Attention: residual2 = x + proj(attn(qkv(ln1(x)))).
    a.datty.zero();
    linear_backward(a.datty.data(), d(lp.attn_proj_w), d(lp.attn_proj_b), a.dres.data(), a.atty[L].data(),
                    w(lp.attn_proj_w), N, C, C);
    a.dqkv.zero();
    attention_->backward(a.dqkv.data(), a.datty.data(), a.atty[L].data(), a.att_lse[L].data(), a.qkv_of(L), B,
                         T, H, D);
    a.dln.zero();
    linear_backward(a.dln.data(), d(lp.qkv_w), d(lp.qkv_b), a.dqkv.data(), a.ln1[L].data(), w(lp.qkv_w), N, C,
                    3 * C);
    layernorm_backward(a.dres.data(), d(lp.ln1_w), d(lp.ln1_b), a.dln.data(), x, w(lp.ln1_w),
                       a.ln1_mean[L].data(), a.ln1_rstd[L].data(), N, C);
    hooks_->after_backward(ParamTable::layer_unit(l));
  }
  embedding_backward(d(&table_.wte()), d(&table_.wpe()), a.dres.data(), a.tokens.data(), a.positions.data(),
                     N, C);
  hooks_->after_backward(0);
}

double training_flops_per_token(const ModelConfig& c, int T) {
  const double C = c.d_model, L = c.n_layer, V = c.vocab_size;
  const double matmul_params = L * 12.0 * C * C + V * C;  // qkv, proj, fc, fc_proj; LM head
  return 6.0 * matmul_params + 6.0 * L * C * T;
}

}  // namespace odyssey
