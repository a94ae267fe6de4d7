// Global-norm gradient clipping.
#pragma once

#include <cstddef>

namespace odyssey {

// Sum of squares of x[0..n), accumulated in double (a partial sum: shards add theirs up); the same
// bits for any thread count.
double sum_of_squares(const float* x, size_t n);

// The factor gradients are multiplied by so their global norm is at most max_norm (1 if already
// below, or if max_norm <= 0 which disables clipping). As torch.nn.utils.clip_grad_norm_:
// max_norm / (norm + 1e-6).
float clip_scale(double global_norm, float max_norm);

}  // namespace odyssey
