// GEMM through oneDNN matmul, with primitives cached by shape. Row-major, contiguous operands;
// transposes are expressed in the memory descriptors (strides), never by copying.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/core/bf16.h"

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

// bf16 GEMM (mixed-precision.md §4-§5): the same C = op(A) @ op(B) (+ bias) (+ C) with bf16 A and B,
// fp32 accumulation (bf16 products are exact in fp32), the bias and the sum post-op applied in fp32, and
// C in fp32 or rounded once to bf16 (oneDNN's rounding; within 1 bf16 ulp). ld as gemm()'s, in
// elements. Primitives are cached by the same key plus the dtypes and take a user-managed scratchpad
// (one per calling thread, grown to the largest primitive's). Where oneDNN creates no bf16 matmul (2.6.3
// without AVX-512) each call widens A and B to fp32 scratch of the calling thread (M K + K N floats, + M N
// for a bf16 C) and runs gemm() on them: bf16 storage, fp32 compute, said once on stderr (§5.5).
void gemm_bf16(float* C, const bf16* A, const bf16* B, const float* bias, int M, int N, int K, bool trans_a,
               bool trans_b, bool accumulate, GemmLd ld = {});
void gemm_bf16(bf16* C, const bf16* A, const bf16* B, const float* bias, int M, int N, int K, bool trans_a,
               bool trans_b, bool accumulate, GemmLd ld = {});
// Whether oneDNN creates bf16 matmuls on this host (asked once); false: the fallback above.
bool gemm_bf16_native();
// The implementation a gemm_bf16 call with these arguments runs: oneDNN's impl_info_str of its primitive
// (created and cached now), e.g. "brg:avx512_core_amx_bf16", "brg:avx512_core_bf16", or "fallback"
// (§5.6). The start-up log takes gemm_bf16_primitives(): one line per created bf16 primitive.
std::string gemm_bf16_implementation(int M, int N, int K, bool trans_a, bool trans_b, bool accumulate,
                                     bool bias, bool dst_bf16, GemmLd ld = {});
std::vector<std::string> gemm_bf16_primitives();
// The largest user scratchpad of the bf16 primitives created so far (what each calling thread holds).
uint64_t gemm_bf16_scratchpad_bytes();

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
