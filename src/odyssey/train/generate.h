// Text generation: autoregressive sampling with temperature, top-k and top-p (nucleus) from a model.
// By default the prompt is prefilled once into a KV cache (model/kv_cache.h) and each new token costs
// one T = 1 pass; use_kv_cache = false recomputes the whole window per token (the reference the
// tests compare the cache against). Both paths use the same window rule when the context is full
// (kv_cache.h: slide to the last ctx/2 tokens), so they produce the same tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "odyssey/model/stage.h"

namespace odyssey {

struct SamplingOptions {
  int max_tokens = 64;
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: whole vocabulary
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1: no nucleus cut
  uint64_t seed = 1;
  int stop_token = -1;       // generation stops after this token (-1: never)
  bool use_kv_cache = true;  // false: recompute the window for every token
};

// Model time of one generation (sampling and the on_token callback not included).
struct GenerationStats {
  int prompt_tokens = 0;  // tokens prefilled (the prompt, at most ctx)
  double prefill_s = 0;   // the pass over the prompt that yields the first new token
  int decode_steps = 0;   // passes after it, one per further new token
  double decode_s = 0;
  int64_t slides = 0;  // context-full window slides
};

// Samples from logits [V] with u a uniform draw in [0, 1). Greedy (argmax, lowest index on ties) when
// temperature <= 0. Otherwise, in this order: p = softmax(logits / temperature); keep the top_k
// most likely (top_k <= 0 or >= V: all); keep the smallest prefix of those, by descending
// probability (ties: lower id first), whose mass is >= top_p of theirs (top_p >= 1: all; always at
// least one token); draw from what is left, renormalised.
int sample_token(const float* logits, int V, float temperature, int top_k, float top_p, float u);

// Appends up to max_tokens tokens to `prompt` (which must not be empty); on_token is called with each
// new token as it is produced (streaming). Stops after options.stop_token. Token i (from 0) is drawn
// with u = philox_uniform(seed, 0, i), so the output is a function of (model, prompt, options).
// Returns the new tokens; fills *stats when given.
std::vector<int> generate_tokens(Stage& model, const std::vector<int>& prompt, const SamplingOptions& options,
                                 const std::function<void(int)>& on_token = {},
                                 GenerationStats* stats = nullptr);

}  // namespace odyssey
