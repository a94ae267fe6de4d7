// Text generation: autoregressive sampling with temperature and top-k from a trained model.
// (This version recomputes the window each token; the KV-cache version replaces it.)
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "odyssey/model/gpt2.h"

namespace odyssey {

struct SamplingOptions {
  int max_tokens = 64;
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: whole vocabulary
  uint64_t seed = 1;
  int stop_token = -1;  // generation stops after this token (-1: never)
};

// Samples from logits [V]: softmax(logits / temperature) restricted to the top_k largest; u is a
// uniform draw in [0, 1). Greedy (argmax, lowest index on ties) when temperature <= 0.
int sample_token(const float* logits, int V, float temperature, int top_k, float u);

// Appends up to max_tokens tokens to `prompt` (which must not be empty); on_token is called with each
// new token as it is produced (streaming). Returns the new tokens.
std::vector<int> generate_tokens(GPT2& model, const std::vector<int>& prompt, const SamplingOptions& options,
                                 const std::function<void(int)>& on_token = {});

}  // namespace odyssey
