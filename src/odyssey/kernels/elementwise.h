// Small elementwise kernels: residual add and its backward.
#pragma once

#include <cstddef>

namespace odyssey {

// out = a + b
void add_forward(float* out, const float* a, const float* b, size_t n);
// dst += src
void accumulate(float* dst, const float* src, size_t n);

}  // namespace odyssey
