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

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  // Rows are grouped in fixed blocks (independent of the thread count); each block owns one partial
  // row of dweight and of dbias: partial [blocks, 2, C].
  constexpr int kRowsPerBlock = 32;
  const int blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<float> partial(static_cast<size_t>(blocks) * 2 * C, 0.0f);

#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    float* pw = partial.data() + static_cast<size_t>(blk) * 2 * C;
    float* pb = pw + C;
    const int n_end = std::min(N, (blk + 1) * kRowsPerBlock);
    for (int n = blk * kRowsPerBlock; n < n_end; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      float* dx = dinp + static_cast<size_t>(n) * C;
      const float m = mean[n], s = rstd[n];
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
    }
  }

  // Blocks summed in order for every channel; threads take slices of channels, and the innermost
  // loop runs along channels so it vectorizes.
  constexpr int kSlice = 64;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < slices; ++sl) {
    const int c0 = sl * kSlice, width = std::min(kSlice, C - c0);
    float w[kSlice] = {}, b[kSlice] = {};
    for (int blk = 0; blk < blocks; ++blk) {
      const float* pw = partial.data() + static_cast<size_t>(blk) * 2 * C + c0;
      const float* pb = pw + C;
#pragma omp simd
      for (int j = 0; j < width; ++j) {
        w[j] += pw[j];
        b[j] += pb[j];
      }
    }
    for (int j = 0; j < width; ++j) {
      dweight[c0 + j] += w[j];
      dbias[c0 + j] += b[j];
    }
  }
}

}  // namespace odyssey
