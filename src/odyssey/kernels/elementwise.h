// Small elementwise kernels: residual add, its backward, and zeroing a gradient buffer.
#pragma once

#include <cstddef>

namespace odyssey {

// out = a + b
void add_forward(float* out, const float* a, const float* b, size_t n);
// dst += src
void accumulate(float* dst, const float* src, size_t n);
// dst[0, n) = 0 on every thread: one thread's memset leaves the other cores idle, and a single core
// does not saturate the memory bus (a step's gradient and d(qkv) zeroing ran at half the wall rate).
void fill_zero(float* dst, size_t n);

}  // namespace odyssey
