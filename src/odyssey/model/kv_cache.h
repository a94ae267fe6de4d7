// Incremental inference for one sequence with a key/value cache, for every architecture: the prompt runs once
// as a batch (prefill), then each new token runs alone (T = 1) with attention against the cached keys and
// values of every earlier position, so the prefix is never recomputed.
//
// The engine reads the model's parameters (model.param(tensor)) at every call and owns
// only the cache and scratch: K and V [n_layer][ctx, Hkv D] plus the architecture's decoder (one
// layer's activations for up to ctx tokens), all allocated once in the constructor (no allocation per
// token in this class; the attention kernel reuses its own workspace, kernels/attention_workspace.h).
// The decoder runs the model's own block (decoder.h) with a cached attention op that appends each chunk's K
// and V (after RoPE, for Llama) and attends over the whole cache, so it computes exactly what the stage's
// forward computes for the cached window, but the LM head only for the last position.
//
// Context full (ctx = model.seq_len): appending to a full cache SLIDES the window: the cache is reset
// and the last ctx/2 cached tokens are re-prefilled at positions 0..ctx/2-1, then the new token is
// appended at position ctx/2. So a long generation costs one prefill of ctx/2 tokens every ctx/2 - 1
// tokens, generation never stops for lack of context, and the model sees at least ctx/2 tokens of
// history. The window is always a suffix of the sequence whose first token sits at position 0, as
// the model was trained. A prompt longer than ctx keeps its last ctx tokens. generate_tokens' recompute
// path (use_kv_cache = false) applies the same rule, so both paths see the same windows.
#pragma once

#include <cstdint>
#include <vector>

#include <memory>

#include "odyssey/core/buffer.h"
#include "odyssey/model/decoder.h"
#include "odyssey/model/stage.h"

namespace odyssey {

class KVCacheEngine {
 public:
  // The model must outlive the engine; its parameters may change between calls (they are read at
  // each call), but then the cache is stale and prefill() must run again.
  explicit KVCacheEngine(const Stage& model);
  KVCacheEngine(const KVCacheEngine&) = delete;  // the layers hold pointers into it
  KVCacheEngine& operator=(const KVCacheEngine&) = delete;

  // Resets the cache and runs the prompt (n >= 1 tokens; only the last ctx are kept) as one batch.
  // Returns the logits [V] of the next token after the prompt, valid until the next call.
  const float* prefill(const int* tokens, int n);
  const float* prefill(const std::vector<int>& tokens) { return prefill(tokens.data(), int(tokens.size())); }

  // Appends one token (sliding the window first when the cache is full, see above) and returns the
  // logits [V] of the token after it, valid until the next call.
  const float* step(int token);

  void reset() { length_ = 0; }
  int length() const { return length_; }      // tokens in the cache = position of the next token
  int capacity() const { return ctx_; }       // model.seq_len
  int64_t slides() const { return slides_; }  // how many times the window has slid

  // Bytes held: cache plus scratch.
  size_t bytes() const;

 private:
  // Runs tokens[0..T) at positions length_..length_+T-1, appending their K and V to the cache.
  void run(const int* tokens, int T);

  // One layer's attention against its cache [ctx, Hkv D] of keys and values: appends the chunk's k
  // and v rows at position `start`, then attends from there over every cached key (forward only).
  class CachedAttention : public AttentionOp {
   public:
    FloatBuffer k, v;  // [ctx, Hkv D]
    int Hkv = 0;
    int start = 0;
    void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                 AttentionSavedPtr& saved) override;
    void backward(float*, const float*, const float*, const float*, const float*, int, int, int, int,
                  const AttentionSaved*) override;
  };

  const int ctx_, V_;
  int length_ = 0;
  int64_t slides_ = 0;
  IntBuffer cached_;                     // [ctx] token ids in the cache (for re-prefill on a slide)
  std::vector<CachedAttention> layers_;  // per layer: its K and V cache
  std::vector<AttentionOp*> attention_;  // &layers_[l]
  IntBuffer tokens_, positions_;         // [ctx]
  std::unique_ptr<Decoder> decoder_;     // the architecture's forward, for up to ctx tokens
  const float* logits_ = nullptr;        // [V] of the last run
};

}  // namespace odyssey
