// Blockwise H32 over a whole buffer; the per-block work is the inline hadamard32_block.
#include "odyssey/kernels/hadamard.h"

#include "odyssey/core/error.h"

namespace odyssey {

namespace {
constexpr size_t kParallelMin = size_t{1} << 15;  // elements; below this threads cost more than they save
}

void hadamard32(float* x, size_t n) {
  ODY_CHECK(n % 32 == 0, "hadamard32: length {} is not a multiple of 32 (pad the buffer)", n);
  const size_t blocks = n / 32;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t b = 0; b < blocks; ++b) hadamard32_block(x + b * 32);
}

}  // namespace odyssey
