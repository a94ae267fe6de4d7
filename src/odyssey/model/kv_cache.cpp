#include "odyssey/model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {

KVCacheEngine::KVCacheEngine(const GPT2& model)
    : model_(model),
      ctx_(model.config().seq_len),
      C_(model.config().d_model),
      H_(model.config().n_head),
      V_(model.config().vocab_size),
      n_layer_(model.config().n_layer) {
  const size_t T = size_t(ctx_), C = size_t(C_);
  cached_.resize(T);
  k_.resize(size_t(n_layer_));
  v_.resize(size_t(n_layer_));
  for (int l = 0; l < n_layer_; ++l) {
    k_[size_t(l)].resize(T * C);
    v_[size_t(l)].resize(T * C);
  }
  tokens_.resize(T);
  positions_.resize(T);
  x_.resize(T * C);
  ln_.resize(T * C);
  mean_.resize(T);
  rstd_.resize(T);
  qkv_.resize(T * 3 * C);
  atty_.resize(T * C);
  proj_.resize(T * C);
  lse_.resize(size_t(H_) * T);
  fch_.resize(T * 4 * C);
  logits_.resize(size_t(V_));
}

size_t KVCacheEngine::bytes() const {
  size_t total = cached_.bytes() + tokens_.bytes() + positions_.bytes() + x_.bytes() + ln_.bytes() +
                 mean_.bytes() + rstd_.bytes() + qkv_.bytes() + atty_.bytes() + proj_.bytes() + lse_.bytes() +
                 fch_.bytes() + logits_.bytes();
  for (int l = 0; l < n_layer_; ++l) total += k_[size_t(l)].bytes() + v_[size_t(l)].bytes();
  return total;
}

const float* KVCacheEngine::prefill(const int* tokens, int n) {
  ODY_CHECK(n >= 1, "prefill: the prompt is empty");
  const int T = std::min(n, ctx_);  // a longer prompt keeps its last ctx tokens
  reset();
  run(tokens + (n - T), T);
  return logits_.data();
}

const float* KVCacheEngine::step(int token) {
  if (length_ == ctx_) {
    // Slide: the last ctx/2 cached tokens and the new one, staged at the front of cached_, run as one
    // batch from position 0 (run() copies its input before it writes cached_).
    const int keep = ctx_ / 2;
    std::memmove(cached_.data(), cached_.data() + (ctx_ - keep), size_t(keep) * sizeof(int));
    cached_[size_t(keep)] = token;
    ++slides_;
    reset();
    run(cached_.data(), keep + 1);
    return logits_.data();
  }
  run(&token, 1);
  return logits_.data();
}

void KVCacheEngine::run(const int* tokens, int T) {
  const int start = length_, C = C_, H = H_, D = C_ / H_, V = V_;
  ODY_CHECK(T >= 1 && start + T <= ctx_, "kv cache: {} tokens at position {} exceed the context {}", T, start,
            ctx_);
  for (int i = 0; i < T; ++i) {
    ODY_CHECK(tokens[i] >= 0 && tokens[i] < V, "token id {} at position {} is outside the vocabulary [0, {})",
              tokens[i], start + i, V);
    tokens_[size_t(i)] = tokens[i];
    positions_[size_t(i)] = start + i;
  }
  // tokens may alias cached_ (a slide), so cached_ is written only after the copy above.
  std::memcpy(cached_.data() + start, tokens_.data(), size_t(T) * sizeof(int));

  // Through param(): a unit's storage may have been repointed (ZeRO-3 gathers).
  auto w = [&](const ParamInfo& t) -> const float* { return model_.param(t); };
  const ParamTable& table = model_.table();
  const size_t TC = size_t(T) * C;
  float* x = x_.data();
  embedding_forward(x, tokens_.data(), positions_.data(), w(table.wte()), w(table.wpe()), T, C);
  for (int l = 0; l < n_layer_; ++l) {
    const LayerParams& lp = table.layer(l);
    float* kc = k_[size_t(l)].data();
    float* vc = v_[size_t(l)].data();
    layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x, w(*lp.ln1_w), w(*lp.ln1_b), T, C);
    linear_forward(qkv_.data(), ln_.data(), w(*lp.qkv_w), w(*lp.qkv_b), T, C, 3 * C);
    // Append this chunk's k and v rows (qkv [T, 3C] = q | k | v) to the cache [ctx, C].
    for (int i = 0; i < T; ++i) {
      const float* row = qkv_.data() + size_t(i) * 3 * C;
      std::memcpy(kc + size_t(start + i) * C, row + C, size_t(C) * sizeof(float));
      std::memcpy(vc + size_t(start + i) * C, row + 2 * C, size_t(C) * sizeof(float));
    }
    // Queries at positions start.. against every cached key 0..start+T-1, causal.
    const int Tk = start + T;
    attention_forward({atty_.data(), int64_t(T) * C, C}, lse_.data(),
                      {qkv_.data(), int64_t(T) * 3 * C, 3 * C}, {kc, int64_t(Tk) * C, C},
                      {vc, int64_t(Tk) * C, C}, {1, T, Tk, H, H, D}, {MaskKind::causal, start, 0},
                      1.0f / std::sqrt(float(D)));
    linear_forward(proj_.data(), atty_.data(), w(*lp.attn_proj_w), w(*lp.attn_proj_b), T, C, C);
    accumulate(x, proj_.data(), TC);
    layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x, w(*lp.ln2_w), w(*lp.ln2_b), T, C);
    linear_forward(fch_.data(), ln_.data(), w(*lp.fc_w), w(*lp.fc_b), T, C, 4 * C);
    gelu_forward(fch_.data(), fch_.data(), TC * 4);
    linear_forward(proj_.data(), fch_.data(), w(*lp.fc_proj_w), w(*lp.fc_proj_b), T, 4 * C, C);
    accumulate(x, proj_.data(), TC);
  }
  // Only the last position's logits are needed: final LayerNorm and tied LM head on one row.
  const float* last = x + size_t(T - 1) * C;
  layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), last, w(table.lnf_w()), w(table.lnf_b()), 1, C);
  linear_forward(logits_.data(), ln_.data(), w(table.wte()), nullptr, 1, C, V);
  length_ = start + T;
}

}  // namespace odyssey
