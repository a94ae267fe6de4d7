// Residual add, gradient accumulation and zeroing: pure bandwidth, so threads only for large arrays.
#include "odyssey/kernels/elementwise.h"

#include <algorithm>
#include <cstring>

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

void fill_zero(float* dst, size_t n) {
  constexpr size_t kBlock = size_t{1} << 14;  // floats per memset: 64 KiB
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t at = b * kBlock;
    std::memset(dst + at, 0, std::min(kBlock, n - at) * sizeof(float));
  }
}

}  // namespace odyssey
