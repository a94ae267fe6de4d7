// Linear layer on top of gemm(): the weight [OC, C] is the transposed right operand in forward, the
// plain one for dinp, and dweight takes dout transposed, so no operand is ever copied.
#include "odyssey/kernels/linear.h"

#include <algorithm>

#include "odyssey/kernels/gemm.h"

namespace odyssey {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                    int OC, int64_t ld_out) {
  // out [N, OC] = inp [N, C] @ weight^T [C, OC] + bias
  gemm(out, inp, weight, bias, N, OC, C, false, true, false, {.c = ld_out});
}

// dbias [OC] += column sums of dout [N, OC]. Threads own blocks of columns and walk all rows, so each
// sum has one fixed order (deterministic, no atomics); the block is a row of independent lanes.
void linear_backward_bias(float* dbias, const float* dout, int N, int OC, int64_t ld_out) {
  const size_t ld = ld_out > 0 ? size_t(ld_out) : size_t(OC);
  constexpr int kBlock = 64;
  const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int o0 = blk * kBlock;
    const int width = std::min(kBlock, OC - o0);
    double acc[kBlock] = {};  // double: a sum over every token of the step
    for (int n = 0; n < N; ++n) {
      const float* row = dout + static_cast<size_t>(n) * ld + o0;
#pragma omp simd
      for (int j = 0; j < width; ++j) acc[j] += row[j];
    }
    for (int j = 0; j < width; ++j) dbias[o0 + j] += static_cast<float>(acc[j]);
  }
}

void linear_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC,
                           int64_t ld_out) {
  gemm(dinp, dout, weight, nullptr, N, C, OC, false, false, false, {.a = ld_out});
}

void linear_backward_weight(float* dweight, const float* dout, const float* inp, int N, int C, int OC,
                            int64_t ld_out) {
  gemm(dweight, dout, inp, nullptr, OC, C, N, true, false, true, {.a = ld_out});
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  if (dinp) linear_backward_input(dinp, dout, weight, N, C, OC);
  linear_backward_weight(dweight, dout, inp, N, C, OC);
  if (dbias) linear_backward_bias(dbias, dout, N, OC);
}

}  // namespace odyssey
