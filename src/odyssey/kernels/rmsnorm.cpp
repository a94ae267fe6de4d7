// RMSNorm over rows of C. Backward computes dinp row by row and reduces dweight through per-block
// partial sums added in a fixed order, so the result is bitwise the same for any thread count.
#include "odyssey/kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace odyssey {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = weight[c] * (x[c] * r);
    rstd[n] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
  // Rows in fixed blocks (independent of the thread count), each owning one partial row of dweight.
  constexpr int kRowsPerBlock = 32;
  const int blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<float> partial(static_cast<size_t>(blocks) * C, 0.0f);
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    float* pw = partial.data() + static_cast<size_t>(blk) * C;
    const int n_end = std::min(N, (blk + 1) * kRowsPerBlock);
    for (int n = blk * kRowsPerBlock; n < n_end; ++n) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      float* dx = dinp + static_cast<size_t>(n) * C;
      const float r = rstd[n];
      float gx = 0.0f;
#pragma omp simd reduction(+ : gx)
      for (int c = 0; c < C; ++c) gx += dy[c] * weight[c] * x[c];
      const float k = r * r * r * gx / C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        dx[c] += r * dy[c] * weight[c] - x[c] * k;
        pw[c] += dy[c] * (x[c] * r);
      }
    }
  }
  constexpr int kSlice = 64;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < slices; ++sl) {
    const int c0 = sl * kSlice, width = std::min(kSlice, C - c0);
    float w[kSlice] = {};
    for (int blk = 0; blk < blocks; ++blk) {
      const float* pw = partial.data() + static_cast<size_t>(blk) * C + c0;
#pragma omp simd
      for (int j = 0; j < width; ++j) w[j] += pw[j];
    }
    for (int j = 0; j < width; ++j) dweight[c0 + j] += w[j];
  }
}

}  // namespace odyssey
