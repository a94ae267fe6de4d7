#include "odyssey/train/generate.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"
#include "odyssey/core/timer.h"
#include "odyssey/model/kv_cache.h"

namespace odyssey {

int sample_token(const float* logits, int V, float temperature, int top_k, float top_p, float u) {
  ODY_CHECK(V >= 1, "sample_token: empty vocabulary");
  if (temperature <= 0.0f) return int(std::max_element(logits, logits + V) - logits);
  const int k = (top_k > 0 && top_k < V) ? top_k : V;
  const bool nucleus = top_p < 1.0f;
  const float max_logit = *std::max_element(logits, logits + V);
  // Unnormalised probabilities; double so that sums over 50k tokens keep their small terms.
  auto weight = [&](int id) { return std::exp(double(logits[id] - max_logit) / temperature); };
  // Descending probability, ties by lower id (deterministic).
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };

  std::vector<int> ids(size_t(V), 0);
  std::iota(ids.begin(), ids.end(), 0);
  int sorted = 0;  // ids[0, sorted) hold the most likely tokens in order
  if (k < V) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
    sorted = k;
  }
  int n = k;  // candidates: ids[0, n)
  if (nucleus) {
    double total = 0;
    for (int i = 0; i < k; ++i) total += weight(ids[size_t(i)]);
    const double target = double(top_p) * total;
    // Sort a growing head of the remaining candidates only as far as needed: the nucleus is usually
    // a small part of the vocabulary, so this rarely sorts all of it.
    double cum = 0;
    n = 0;
    while (n < k) {
      if (n == sorted) {
        int m = std::min(k, std::max(64, 4 * sorted));
        std::partial_sort(ids.begin() + sorted, ids.begin() + m, ids.begin() + k, by_logit);
        sorted = m;
      }
      cum += weight(ids[size_t(n)]);
      ++n;
      if (cum >= target) break;
    }
  }
  // Inverse CDF over the candidates (in id order when there was no cut at all).
  double mass = 0;
  for (int i = 0; i < n; ++i) mass += weight(ids[size_t(i)]);
  const double target = double(u) * mass;
  double cum = 0;
  for (int i = 0; i < n; ++i) {
    cum += weight(ids[size_t(i)]);
    if (target < cum) return ids[size_t(i)];
  }
  return ids[size_t(n) - 1];  // u * mass rounded up to the whole mass
}

std::vector<int> generate_tokens(Stage& model, const std::vector<int>& prompt, const SamplingOptions& o,
                                 const std::function<void(int)>& on_token, GenerationStats* stats) {
  ODY_CHECK(!prompt.empty(), "generate: the prompt is empty (it must encode to at least one token)");
  ODY_CHECK(o.top_p > 0.0f && o.top_p <= 1.0f, "generate: top_p must be in (0, 1], got {}", o.top_p);
  ODY_CHECK(o.max_tokens >= 0, "generate: max_tokens must be >= 0, got {}", o.max_tokens);
  const int ctx = model.config().seq_len, V = model.config().vocab_size;
  GenerationStats st;
  st.prompt_tokens = int(std::min<size_t>(prompt.size(), size_t(ctx)));
  std::vector<int> produced;
  produced.reserve(size_t(o.max_tokens));

  std::unique_ptr<KVCacheEngine> engine;
  if (o.use_kv_cache && o.max_tokens > 0) engine = std::make_unique<KVCacheEngine>(model);
  // Recompute path: the window is tokens[start, end), kept by the cache's rule (kv_cache.h): a prompt
  // longer than ctx keeps its last ctx; past ctx, slide to the last ctx/2 tokens plus the new one.
  std::vector<int> tokens;
  size_t start = 0;
  if (!engine) {
    tokens = prompt;
    start = prompt.size() - size_t(st.prompt_tokens);
  }
  // Logits [V] for new token i.
  auto next_logits = [&](int i) -> const float* {
    if (engine) return i == 0 ? engine->prefill(prompt) : engine->step(produced.back());
    if (tokens.size() - start > size_t(ctx)) {
      start = tokens.size() - size_t(ctx / 2 + 1);
      ++st.slides;
    }
    const int T = int(tokens.size() - start);
    model.forward(tokens.data() + start, nullptr, nullptr, 1, T, nullptr);
    return model.logits().row(T - 1);
  };

  for (int i = 0; i < o.max_tokens; ++i) {
    Timer timer;
    const float* logits = next_logits(i);
    if (i == 0) {
      st.prefill_s = timer.seconds();
    } else {
      st.decode_s += timer.seconds();
      ++st.decode_steps;
    }
    int next =
        sample_token(logits, V, o.temperature, o.top_k, o.top_p, philox_uniform(o.seed, 0, uint64_t(i)));
    produced.push_back(next);
    if (!engine) tokens.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_token) break;
  }
  if (engine) st.slides = engine->slides();
  if (stats) *stats = st;
  return produced;
}

}  // namespace odyssey
