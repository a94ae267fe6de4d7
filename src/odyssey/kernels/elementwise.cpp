// Residual add and gradient accumulation: pure bandwidth, so threads only for large arrays.
#include "odyssey/kernels/elementwise.h"

#include "odyssey/kernels/parallel_min.h"

namespace odyssey {

void add_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace odyssey
