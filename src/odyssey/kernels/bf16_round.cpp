#include "odyssey/kernels/bf16_round.h"

#include "odyssey/core/bf16.h"

namespace odyssey {

namespace {

// Below this many floats a call runs on the calling thread (a team costs more than the pass).
constexpr int64_t kParallelFloats = int64_t{1} << 16;

}  // namespace

void round_bf16_rows(float* x, int64_t rows, int64_t cols, int64_t ld) {
  if (ld == 0 || ld == cols) {  // one dense run
    const int64_t n = rows * cols;
#pragma omp parallel for schedule(static) if (n >= kParallelFloats)
    for (int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelFloats)
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * ld;
    for (int64_t i = 0; i < cols; ++i) p[i] = round_to_bf16(p[i]);
  }
}

void copy_round_bf16(float* y, const float* x, size_t n) {
#pragma omp parallel for schedule(static) if (int64_t(n) >= kParallelFloats)
  for (size_t i = 0; i < n; ++i) y[i] = round_to_bf16(x[i]);
}

}  // namespace odyssey
