// fp32 values rounded to bf16 and kept in fp32 storage (RNE/FTZ, core/bf16.h): the bf16 policy's
// rounding points (mixed-precision.md §3) where a tensor stays in an fp32 buffer. A rounded value widens
// back exactly, so a GEMM over rounded fp32 operands computes what a bf16 GEMM with fp32 accumulation
// does, up to summation order (kernels/gemm.h's fallback runs exactly that GEMM).
#pragma once

#include <cstddef>
#include <cstdint>

namespace odyssey {

// x[i] = RNE(x[i]) for rows of `cols` floats, `ld` floats apart (0: cols).
void round_bf16_rows(float* x, int64_t rows, int64_t cols, int64_t ld = 0);
// y[i] = RNE(x[i]) over n floats.
void copy_round_bf16(float* y, const float* x, size_t n);

}  // namespace odyssey
