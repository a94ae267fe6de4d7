#include "odyssey/model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/model/fused_qkv.h"

namespace odyssey {

KVCacheEngine::KVCacheEngine(const Stage& model)
    : ctx_(model.config().seq_len), V_(model.config().vocab_size), layers_(size_t(model.config().n_layer)) {
  const ModelConfig& c = model.config();
  ODY_CHECK(model.range() == StageRange{}.resolved(c),
            "the KV cache runs the whole model, not a pipeline stage");
  const size_t T = size_t(ctx_), KD = size_t(c.kv_heads()) * c.head_dim();
  cached_.resize(T);
  for (CachedAttention& l : layers_) {
    l.k.resize(T * KD);
    l.v.resize(T * KD);
    l.Hkv = c.kv_heads();
    attention_.push_back(&l);
  }
  tokens_.resize(T);
  positions_.resize(T);
  decoder_ = model.make_decoder(ctx_);
}

void KVCacheEngine::CachedAttention::forward(float* out, float* lse, const float* qkv, int /*B = 1*/, int T,
                                             int H, int D, AttentionSavedPtr& /*saved*/) {
  const FusedQkv f{H, Hkv, D};
  const int64_t KD = int64_t(Hkv) * D;
  // Append this chunk's k and v rows (qkv [T, (H + 2 Hkv) D] = q | k | v) to the cache [ctx, Hkv D].
  for (int i = 0; i < T; ++i) {
    const float* row = qkv + i * f.width();
    std::memcpy(k.data() + (start + i) * KD, row + f.k_offset(), size_t(KD) * sizeof(float));
    std::memcpy(v.data() + (start + i) * KD, row + f.v_offset(), size_t(KD) * sizeof(float));
  }
  // Queries at positions start.. against every cached key 0..start+T-1, causal.
  const int Tk = start + T;
  attention_forward(heads_view(out, T, H, D), lse, f.q(qkv, T), {k.data(), Tk * KD, KD},
                    {v.data(), Tk * KD, KD}, {1, T, Tk, H, Hkv, D}, {MaskKind::causal, start, 0},
                    1.0f / std::sqrt(float(D)));
}

void KVCacheEngine::CachedAttention::backward(float*, const float*, const float*, const float*, const float*,
                                              int, int, int, int, const AttentionSaved*) {
  ODY_CHECK(false, "the KV cache's attention is forward only");
}

size_t KVCacheEngine::bytes() const {
  size_t total = cached_.bytes() + tokens_.bytes() + positions_.bytes() + decoder_->bytes();
  for (const CachedAttention& l : layers_) total += l.k.bytes() + l.v.bytes();
  return total;
}

const float* KVCacheEngine::prefill(const int* tokens, int n) {
  ODY_CHECK(n >= 1, "prefill: the prompt is empty");
  const int T = std::min(n, ctx_);  // a longer prompt keeps its last ctx tokens
  reset();
  run(tokens + (n - T), T);
  return logits_;
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
    return logits_;
  }
  run(&token, 1);
  return logits_;
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

  for (CachedAttention& l : layers_) l.start = start;  // where this chunk's k and v rows go
  logits_ = decoder_->run(tokens_.data(), positions_.data(), T, attention_.data());
  length_ = start + T;
}

}  // namespace odyssey
