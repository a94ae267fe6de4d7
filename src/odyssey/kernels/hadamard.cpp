// Blockwise H32 over a whole buffer; the per-block work is the inline hadamard32_block.
#include "odyssey/kernels/hadamard.h"

#include "odyssey/core/error.h"
#include "odyssey/kernels/parallel_min.h"

namespace odyssey {

void hadamard32(float* x, size_t n) {
  ODY_CHECK(n % 32 == 0, "hadamard32: length {} is not a multiple of 32 (pad the buffer)", n);
  const size_t blocks = n / 32;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (size_t b = 0; b < blocks; ++b) hadamard32_block(x + b * 32);
}

}  // namespace odyssey
