// LayerNorm over rows of C. Forward is two passes over a row that stays in L1 (mean, then variance
// of the centred values: no catastrophic cancellation when |mean| >> std). Backward computes dinp
// row by row and reduces dweight/dbias through per-block partial sums added in a fixed order, so
// the result is bitwise the same for any thread count.
#include "odyssey/kernels/layernorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace odyssey {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward_rows(float* dinp, NormGradSums& sums, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int n, int C) {
  sums.add(n, [&](int r, float* pw) {
    float* pb = pw + C;
    const float* x = inp + static_cast<size_t>(r) * C;
    const float* dy = dout + static_cast<size_t>(r) * C;
    float* dx = dinp + static_cast<size_t>(r) * C;
    const float m = mean[r], s = rstd[r];
    // With xhat = (x - m) s and g = dy * weight:
    // dx = s (g - mean(g) - xhat mean(g xhat))
    float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float g = dy[c] * weight[c];
      g_sum += g;
      gx_sum += g * xhat;
    }
    const float g_mean = g_sum / C, gx_mean = gx_sum / C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float g = dy[c] * weight[c];
      dx[c] += s * (g - g_mean - xhat * gx_mean);
      pw[c] += dy[c] * xhat;
      pb[c] += dy[c];
    }
  });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  NormGradSums sums(2 * C);
  layernorm_backward_rows(dinp, sums, dout, inp, weight, mean, rstd, N, C);
  sums.finish(dweight, dbias);
}

}  // namespace odyssey
