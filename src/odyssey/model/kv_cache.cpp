#include "odyssey/model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {

KVCacheEngine::KVCacheEngine(const Stage& model)
    : model_(model),
      names_(model.table(), model.range()),
      ctx_(model.config().seq_len),
      C_(model.config().d_model),
      H_(model.config().n_head),
      V_(model.config().vocab_size),
      n_layer_(model.config().n_layer),
      layers_(size_t(model.config().n_layer)) {
  ODY_CHECK(model.config().arch == "gpt2", "the KV cache runs the GPT-2 block; model.arch is '{}'",
            model.config().arch);
  ODY_CHECK(model.range() == StageRange{}.resolved(model.config()),
            "the KV cache runs the whole model, not a pipeline stage");
  const size_t T = size_t(ctx_), C = size_t(C_);
  cached_.resize(T);
  for (CachedAttention& l : layers_) {
    l.k.resize(T * C);
    l.v.resize(T * C);
  }
  tokens_.resize(T);
  positions_.resize(T);
  x_.resize(T * C);
  acts_.allocate(model.config(), 1, ctx_, true);
  ln_.resize(C);
  mean_.resize(1);
  rstd_.resize(1);
  logits_.resize(size_t(V_));
}

void KVCacheEngine::CachedAttention::forward(float* out, float* lse, const float* qkv, int /*B = 1*/, int T,
                                             int H, int D, AttentionSavedPtr& /*saved*/) {
  const int C = H * D;
  // Append this chunk's k and v rows (qkv [T, 3C] = q | k | v) to the cache [ctx, C].
  for (int i = 0; i < T; ++i) {
    const float* row = qkv + size_t(i) * 3 * C;
    std::memcpy(k.data() + size_t(start + i) * C, row + C, size_t(C) * sizeof(float));
    std::memcpy(v.data() + size_t(start + i) * C, row + 2 * C, size_t(C) * sizeof(float));
  }
  // Queries at positions start.. against every cached key 0..start+T-1, causal.
  const int Tk = start + T;
  attention_forward({out, int64_t(T) * C, C}, lse, {qkv, int64_t(T) * 3 * C, 3 * C},
                    {k.data(), int64_t(Tk) * C, C}, {v.data(), int64_t(Tk) * C, C}, {1, T, Tk, H, H, D},
                    {MaskKind::causal, start, 0}, 1.0f / std::sqrt(float(D)));
}

void KVCacheEngine::CachedAttention::backward(float*, const float*, const float*, const float*, const float*,
                                              int, int, int, int, const AttentionSaved*) {
  ODY_CHECK(false, "the KV cache's attention is forward only");
}

size_t KVCacheEngine::bytes() const {
  size_t total = cached_.bytes() + tokens_.bytes() + positions_.bytes() + x_.bytes() + acts_.bytes() +
                 scratch_.bytes() + ln_.bytes() + mean_.bytes() + rstd_.bytes() + logits_.bytes();
  for (const CachedAttention& l : layers_) total += l.k.bytes() + l.v.bytes();
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
  const int start = length_, V = V_;
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
  auto w = [&](const ParamInfo& t) { return model_.param(t); };
  const Gpt2Params& table = names_;
  embedding_forward(x_.data(), tokens_.data(), positions_.data(), w(*table.wte), w(*table.wpe), T, C_);
  for (int l = 0; l < n_layer_; ++l) {
    CachedAttention& attention = layers_[size_t(l)];
    attention.start = start;
    gpt2_block_forward(acts_, x_.data(), resolve_layer(table.layer(l), w), attention, scratch_,
                       {1, T, C_, H_});
    std::swap(x_, acts_.residual3);  // the block's output is the next layer's input
  }
  // Only the last position's logits are needed: final LayerNorm and tied LM head on one row.
  const float* last = x_.data() + size_t(T - 1) * C_;
  layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), last, w(*table.lnf_w), w(*table.lnf_b), 1, C_);
  linear_forward(logits_.data(), ln_.data(), w(*table.wte), nullptr, 1, C_, V_);
  length_ = start + T;
}

}  // namespace odyssey
