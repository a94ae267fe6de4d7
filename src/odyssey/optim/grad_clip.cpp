#include "odyssey/optim/grad_clip.h"

namespace odyssey {

double sum_of_squares(const float* x, size_t n) {
  double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (size_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0.0f || global_norm <= max_norm) return 1.0f;
  return float(max_norm / (global_norm + 1e-6));
}

}  // namespace odyssey
