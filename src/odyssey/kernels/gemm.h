// GEMM through oneDNN matmul, with primitives cached by shape. Row-major, contiguous operands;
// transposes are expressed in the memory descriptors (strides), never by copying.
#pragma once

namespace odyssey {

// C[M,N] = op(A) @ op(B) (+ bias[N]) (+ C if accumulate)
//   op(A) is [M,K]: A is stored [M,K], or [K,M] when trans_a.
//   op(B) is [K,N]: B is stored [K,N], or [N,K] when trans_b.
// bias may be null. Thread count follows OpenMP (omp_get_max_threads()).
void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool trans_a,
          bool trans_b, bool accumulate);

// Achieved GFLOP/s of square fp32 GEMMs (n x n x n through gemm()), timed for about `seconds` after
// one warm-up call. The trainer divides by it to report MFU.
double measure_gemm_gflops(int n = 1024, double seconds = 0.3);

}  // namespace odyssey
