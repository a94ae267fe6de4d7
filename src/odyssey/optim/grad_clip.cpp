#include "odyssey/optim/grad_clip.h"

#include <algorithm>
#include <vector>

namespace odyssey {

// Fixed blocks, each summed in 8 independent lanes, the block sums added in block order: the same
// bits for any thread count (an OpenMP reduction adds per-thread partials, which differ with the thread
// count), and 8 lanes instead of one serial chain of dependent adds.
double sum_of_squares(const float* x, size_t n) {
  constexpr size_t kBlock = size_t(1) << 14, kLanes = 8;
  const size_t blocks = (n + kBlock - 1) / kBlock;
  // The block sums, in a buffer reused across calls (it runs every step), grown but never shrunk. One
  // per calling thread, so concurrent callers do not share it; the loop's threads write through the
  // pointer (inside the parallel region the name would be each worker's own thread_local).
  thread_local std::vector<double> reused;
  if (reused.size() < blocks) reused.resize(blocks);
  double* block_sums = reused.data();
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; ++b) {
    const float* p = x + b * kBlock;
    const size_t len = std::min(kBlock, n - b * kBlock);
    double lane[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= len; i += kLanes)
      for (size_t j = 0; j < kLanes; ++j) lane[j] += double(p[i + j]) * double(p[i + j]);
    for (; i < len; ++i) lane[i % kLanes] += double(p[i]) * double(p[i]);
    double s = 0.0;
    for (double v : lane) s += v;
    block_sums[b] = s;
  }
  double sum = 0.0;
  for (size_t b = 0; b < blocks; ++b) sum += block_sums[b];
  return sum;
}

float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0.0f || global_norm <= max_norm) return 1.0f;
  return float(max_norm / (global_norm + 1e-6));
}

}  // namespace odyssey
