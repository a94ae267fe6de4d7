#include "odyssey/train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"

namespace odyssey {

int sample_token(const float* logits, int V, float temperature, int top_k, float u) {
  if (temperature <= 0.0f) return int(std::max_element(logits, logits + V) - logits);
  std::vector<int> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  int k = (top_k > 0 && top_k < V) ? top_k : V;
  // The k largest logits, in descending order (ties by lower id, for determinism).
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  const float max_logit = logits[ids[0]];
  std::vector<double> probs(static_cast<size_t>(k));
  double total = 0;
  for (int i = 0; i < k; ++i)
    total += probs[size_t(i)] = std::exp(double(logits[ids[size_t(i)]] - max_logit) / temperature);
  double target = double(u) * total, cum = 0;
  for (int i = 0; i < k; ++i) {
    cum += probs[size_t(i)];
    if (target < cum) return ids[size_t(i)];
  }
  return ids[size_t(k) - 1];
}

std::vector<int> generate_tokens(GPT2& model, const std::vector<int>& prompt, const SamplingOptions& o,
                                 const std::function<void(int)>& on_token) {
  ODY_CHECK(!prompt.empty(), "generate: the prompt is empty (it must encode to at least one token)");
  const int ctx = model.config().seq_len, V = model.config().vocab_size;
  std::vector<int> tokens = prompt, produced;
  for (int i = 0; i < o.max_tokens; ++i) {
    // The last `ctx` tokens form the window; positions restart at 0 within it.
    int T = int(std::min<size_t>(tokens.size(), size_t(ctx)));
    const int* window = tokens.data() + tokens.size() - size_t(T);
    model.forward(window, nullptr, nullptr, 1, T, nullptr);
    const float* last = model.logits() + size_t(T - 1) * V;
    int next = sample_token(last, V, o.temperature, o.top_k, philox_uniform(o.seed, 0, uint64_t(i)));
    tokens.push_back(next);
    produced.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_token) break;
  }
  return produced;
}

}  // namespace odyssey
