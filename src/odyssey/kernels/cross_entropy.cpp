// Fused softmax + cross-entropy, one row of logits [V] at a time, rows in parallel. Per row: one
// pass for the max (stability: every exponent is <= 0), one for sum(exp); the fused backward
// stores the exponentials in that second pass and scales them in a third, so each logit is
// exponentiated once and the row (200 KB for GPT-2's vocabulary) is read three times from cache.
// The normaliser is sum_exp_shifted (vec_math.h): float lanes, block sums in double.
#include "odyssey/kernels/cross_entropy.h"

#include <cmath>
#include <cstddef>

#include "odyssey/core/error.h"
#include "odyssey/kernels/vec_math.h"

namespace odyssey {

namespace {

void check_targets(const int* targets, int N, int V) {
  for (int n = 0; n < N; ++n)
    ODY_CHECK(targets[n] < V, "cross_entropy: target {} of row {} is outside the vocabulary of {}",
              targets[n], n, V);
}

float row_max(const float* x, int V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int v = 0; v < V; ++v) m = x[v] > m ? x[v] : m;
  return m;
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int* targets, int N, int V, int64_t ld) {
  check_targets(targets, N, V);
  const size_t row = ld > 0 ? size_t(ld) : size_t(V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<size_t>(n) * row;
    if (targets[n] < 0) {
      losses[n] = 0.0f;
      continue;
    }
    const float m = row_max(x, V);
    const double sum = sum_exp_shifted(x, V, m);
    // -log p[t] = log(sum exp(x - m)) - (x[t] - m)
    losses[n] = static_cast<float>(std::log(sum)) - (x[targets[n]] - m);
  }
}

void cross_entropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                    float dloss, int64_t ld) {
  check_targets(targets, N, V);
  const size_t row = ld > 0 ? size_t(ld) : size_t(V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* x = logits_to_dlogits + static_cast<size_t>(n) * row;
    const int t = targets[n];
    if (t < 0) {
      losses[n] = 0.0f;
#pragma omp simd
      for (int v = 0; v < V; ++v) x[v] = 0.0f;
      continue;
    }
    const float m = row_max(x, V);
    const float xt = x[t];                           // read before the row is overwritten
    const double sum = sum_exp_shifted(x, V, m, x);  // x becomes e^(x - m)
    losses[n] = static_cast<float>(std::log(sum)) - (xt - m);
    const float scale = static_cast<float>(dloss / sum);
#pragma omp simd
    for (int v = 0; v < V; ++v) x[v] *= scale;
    x[t] -= dloss;
  }
}

}  // namespace odyssey
