// GEMM through oneDNN matmul, with primitives cached by shape. Row-major, contiguous operands;
// transposes are expressed in the memory descriptors (strides), never by copying.
#pragma once

#include <cstdint>

namespace odyssey {

// C[M,N] = op(A) @ op(B) (+ bias[N]) (+ C if accumulate)
//   op(A) is [M,K]: A is stored [M,K], or [K,M] when trans_a.
//   op(B) is [K,N]: B is stored [K,N], or [N,K] when trans_b.
//   ld: the row strides of A and C as stored when their rows are wider than the matrix (0: dense). The
//   LM head's logits block has padded rows (model/lm_head.h): an odd stride such as GPT-2's V = 50257
//   ran its three GEMMs at 0.55-0.9 of the padded rate.
// bias may be null. Thread count follows OpenMP (omp_get_max_threads()).
// A wide row-major B (not trans_b, N >= 2048; with trans_a only if N is not a power of two) is first copied
// into a scratch buffer with padded rows: oneDNN's sgemm then packs it instead of streaming it in place,
// which ran 1.1-2.8x faster on the GPT-2 shapes that have one (the MLP down-projection's backward: N = 4C;
// bench_kernels prints both: "gflops", "gflops_no_pad"). Other bits than the unpadded call (another
// blocking), within the same rounding.
struct GemmLd {
  int64_t a = 0, c = 0;
};
void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool trans_a,
          bool trans_b, bool accumulate, GemmLd ld = {});

// Achieved GFLOP/s of square fp32 GEMMs (n x n x n through gemm()), timed for about `seconds` after
// one warm-up call. The trainer divides by it to report MFU.
// The padded-B copy: on by default; ODYSSEY_GEMM_PAD_B=0 turns it off (the reference path), as does
// set_gemm_pad_b(false). The variable is read at the first gemm() (or by gemm_pad_b_from_env(), which
// refuses any other value than 0 or 1, naming it).
bool gemm_pad_b();
void set_gemm_pad_b(bool on);
void gemm_pad_b_from_env();
// What a thread's padded-B scratch can hold (a larger B is not padded) when some product has a B of
// `widest_n` columns; 0 below the width that is padded, or with the padding off. The trainer counts it
// with the activations for the widest input of any linear layer.
uint64_t gemm_scratch_bytes(int widest_n);

double measure_gemm_gflops(int n = 1024, double seconds = 0.3);

}  // namespace odyssey
