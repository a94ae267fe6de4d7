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

namespace {

// One row's backward, compiled once: NormGradSums::add calls its row function from two loops (whole
// blocks, the remainder), and g++ vectorized the reduction over C differently in the two inlined
// copies on AVX2, so a row's dx depended on where a piece boundary put it (pieces were not the one
// call's bits). Every row now runs this same code.
[[gnu::noinline]] void rmsnorm_backward_row(float* dx, float* pw, const float* dy, const float* x,
                                            const float* weight, float r, int C) {
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

}  // namespace

void rmsnorm_backward_rows(float* dinp, NormGradSums& sums, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int n, int C) {
  sums.add(n, [&](int row, float* pw) {
    const size_t o = static_cast<size_t>(row) * C;
    rmsnorm_backward_row(dinp + o, pw, dout + o, inp + o, weight, rstd[row], C);
  });
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
  NormGradSums sums(C);
  rmsnorm_backward_rows(dinp, sums, dout, inp, weight, rstd, N, C);
  sums.finish(dweight);
}

}  // namespace odyssey
