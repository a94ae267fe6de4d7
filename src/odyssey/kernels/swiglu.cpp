#include "odyssey/kernels/swiglu.h"

#include <cmath>
#include <cstddef>

namespace odyssey {

void swiglu_forward(float* out, const float* gate_up, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = gate_up + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    float* y = out + static_cast<size_t>(n) * F;
#pragma omp simd
    for (int i = 0; i < F; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int F) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* g = gate_up + static_cast<size_t>(n) * 2 * F;
    const float* u = g + F;
    const float* dy = dout + static_cast<size_t>(n) * F;
    float* dg = dgate_up + static_cast<size_t>(n) * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int i = 0; i < F; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-g[i]));
      dg[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
      du[i] = dy[i] * g[i] * s;
    }
  }
}

}  // namespace odyssey
