// The reference attention kernel: the first blockwise (flash-attention 2) kernel, fp32 throughout,
// kept under its own name so the tests can compare the fast kernel (attention.cpp) against it.
//
// Forward: one task per (b, h, query block of kBlockQ rows); the task walks the key blocks its
// queries can see, keeping a running max m and sum l per row (online softmax), and never holds more
// than a [kBlockQ, kBlockK] tile of scores. Key blocks entirely above the causal diagonal are skipped;
// the mask is applied only on blocks that straddle it (and on the ragged last key block).
//
// Backward (flash-attention 2): with Delta_i = rowsum(dO_i * O_i) and the saved lse, each (query
// block, key block) pair recomputes P = exp(S - lse) and gives
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  dQ += scale dS K,  dK += scale dS^T Q.
// Two race-free schedules, chosen per call (see choose_schedule):
//   fused: one task per (b, kv head) owns dK/dV of that head and dQ of its query heads: 5 block
//          products per pair, but only B * Hkv tasks;
//   split: pass 1 over (b, kv head, key block) accumulates dK/dV, pass 2 over (b, h, query block)
//          recomputes P and dS for dQ: 7 block products per pair, but plenty of tasks.
// Both sum every gradient in the same order with the same operations, so the result is bitwise the
// same whichever schedule and thread count run (tested).
//
// The block products are register-blocked micro-kernels over GCC vector extensions (16 floats, one
// zmm with AVX-512, two ymm with AVX2). Measured on one core for a 64x64x64 S = Q K^T, O += P V pair:
// these ~90 GFLOP/s, oneDNN's gemm (kernels/gemm.h) ~55 (its per-call overhead and primitive-cache
// lock weigh at this size; bench_attention's block_gemm_onednn repeats that side). Tiles of 32 or 128
// query rows measured within noise of 64.
#include "odyssey/kernels/attention_reference.h"

#include <algorithm>
#include <cstring>

#include "odyssey/kernels/attention_schedule.h"
#include "odyssey/kernels/attention_tiles.h"

namespace odyssey {
namespace {

// The first kernel's tile products: 16-float vectors, 4-row micro-kernels, 64 x 64 tiles.
struct ReferenceTiles {
  static constexpr int kBlockQ = 64;  // query rows per tile (a multiple of kRows)
  static constexpr int kBlockK = 64;  // keys per tile: four 16-float vectors per score row
  static constexpr int kW = 16;
  static constexpr int kKVecs = kBlockK / kW;
  static constexpr int kRows = 4;  // rows per micro-kernel call: 4 x 4 vector accumulators

  using vf = float __attribute__((vector_size(kW * sizeof(float))));
  using vi = int32_t __attribute__((vector_size(kW * sizeof(int32_t))));

  static vf load(const float* p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
  static_assert(kW == 16);
  static vf splat(float x) {  // one vbroadcastss (a lane loop or vf{} + x compile to more)
    return vf{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
  }
  static vf vmax(vf a, vf b) { return a > b ? a : b; }
  static float hmax(vf v) {
    float m = v[0];
    for (int i = 1; i < kW; ++i) m = std::max(m, v[i]);
    return m;
  }
  static float hsum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < kW; ++i) s += v[i];
    return s;
  }

  // vexp (vec_math.h) on 16 lanes: the same results. Written on the vector type because `omp simd`
  // loops over vexp compile to 256-bit vectors here (g++ prefers them on AVX-512 parts) and score rows
  // are exactly four 16-float vectors.
  static vf vexp(vf x) { return attention_tiles::vexp_lanes<ReferenceTiles>(x); }

  // S[M, kBlockK] = A[M, :D] . Bt[D, kBlockK]; A has row stride lda. M is a multiple of kRows.
  // Used for S = Qs K^T (Bt = a transposed key block) and dP = dO V^T (Bt = a transposed value block).
  static void abt(float* __restrict s, const float* __restrict a, int64_t lda, const float* __restrict bt,
                  int D, int M) {
    for (int r0 = 0; r0 < M; r0 += kRows) {
      const float* ar = a + r0 * lda;
      vf acc[kRows][kKVecs] = {};
      for (int d = 0; d < D; ++d) {
        vf b[kKVecs];
        for (int v = 0; v < kKVecs; ++v) b[v] = load(bt + d * kBlockK + v * kW);
        for (int r = 0; r < kRows; ++r) {
          vf x = splat(ar[r * lda + d]);
          for (int v = 0; v < kKVecs; ++v) acc[r][v] += x * b[v];
        }
      }
      for (int r = 0; r < kRows; ++r)
        for (int v = 0; v < kKVecs; ++v) store(s + (r0 + r) * kBlockK + v * kW, acc[r][v]);
    }
  }

  // C[kRows, NV*16] += op(A)[kRows, K] . B[K, NV*16]. op(A)[r, k] is a[r * lda + k], or a[k * lda + r]
  // when TransA (P^T and dS^T are read from P and dS in place, never transposed).
  template <bool TransA, int NV>
  static void ab_tile(float* __restrict c, int64_t ldc, const float* __restrict a, int64_t lda,
                      const float* __restrict b, int64_t ldb, int K) {
    vf acc[kRows][NV];
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = load(c + r * ldc + v * kW);
    for (int k = 0; k < K; ++k) {
      vf bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = load(b + k * ldb + v * kW);
      for (int r = 0; r < kRows; ++r) {
        vf x = splat(TransA ? a[k * lda + r] : a[r * lda + k]);
        for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < NV; ++v) store(c + r * ldc + v * kW, acc[r][v]);
  }

  // C[M, W] += op(A)[M, K] . B[K, W] with W a multiple of 16 (the padded head size), in column chunks
  // of at most 4 vectors so the accumulators stay in registers.
  template <bool TransA>
  static void ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                 int K, int W) {
    for (int r0 = 0; r0 < M; r0 += kRows) {
      float* cr = c + r0 * ldc;
      const float* ar = TransA ? a + r0 : a + r0 * lda;
      for (int c0 = 0; c0 < W; c0 += 4 * kW) {
        switch (std::min(4, (W - c0) / kW)) {
          case 1:
            ab_tile<TransA, 1>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
          case 2:
            ab_tile<TransA, 2>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
          case 3:
            ab_tile<TransA, 3>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
          default:
            ab_tile<TransA, 4>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
        }
      }
    }
  }

  // Everything a task needs to know about the call, with the block geometry.
};

using Kernel = attention_detail::BlockwiseAttention<ReferenceTiles>;

}  // namespace

void attention_reference_forward(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                                 AttentionDims dims, AttentionMask mask, float scale) {
  Kernel::forward(out, lse, q, k, v, dims, mask, scale);
}

void attention_reference_backward(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout,
                                  HeadsView out, const float* lse, HeadsView q, HeadsView k, HeadsView v,
                                  AttentionDims dims, AttentionMask mask, float scale) {
  Kernel::backward(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
}

}  // namespace odyssey
