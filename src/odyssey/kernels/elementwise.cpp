// Residual add and gradient accumulation: pure bandwidth, so threads only for large arrays.
#include "odyssey/kernels/elementwise.h"

namespace odyssey {

namespace {
constexpr size_t kParallelMin = size_t{1} << 15;  // below this, thread start-up costs more than it saves
}

void add_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void accumulate(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace odyssey
