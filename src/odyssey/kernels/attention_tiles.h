// The register-blocked tile products of the fast attention kernel, one shape per vector width. Every
// x86 build compiles the three paths (attention_avx512.cpp, attention_avx2.cpp,
// attention_portable.cpp) and attention.cpp runs the widest the CPU supports:
//
//   path      vector   micro tile (rows x vectors)   accumulators / registers
//   avx512    16 fp32  6 x 4                          24 / 32 zmm
//   avx2       8 fp32  6 x 2                          12 / 16 ymm
//   portable   4 fp32  6 x 2                          12 / 16 xmm (SSE, NEON: 32)
//
// Every product is C[rows, NV vectors] (+)= A . B with one row of B loaded as NV vectors and one
// element of A broadcast per row, so the accumulators, the NV B vectors and one broadcast fit the
// register file: the first kernel's 4 x 16-float tiles needed 32 ymm on AVX2 and spilled. Written on
// GCC vector types, so the three paths are the same code with different constants.
#pragma once

#include <cstdint>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

// The vector types only live inside inlined helpers; their ABI never crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace odyssey::attention_tiles {

// vexp (kernels/vec_math.h) on the lanes of a GCC vector, for the kernels written on vector types (these
// tiles and the reference kernel's): the same range reduction and polynomial, so the same bits lane by lane.
// Ops supplies the vector types Ops::vf (floats) and Ops::vi (int32, as many lanes) and Ops::splat(float) ->
// vf (each kernel broadcasts its own way), and may supply Ops::scale_pow2(p, n) = p * 2^n for integral n
// (AVX-512's vscalefps: one instruction for the seven of the exponent-field version, and the same bits:
// p * 2^n is exact but where it lands in the subnormals, and both round that once). 0 below ~-87.3 and
// for -inf.
template <class Ops>
inline typename Ops::vf vexp_lanes(typename Ops::vf x) {
  using vf = typename Ops::vf;
  using vi = typename Ops::vi;
  const vf lo = Ops::splat(-87.33f), hi = Ops::splat(88.72f);
  const vi underflow = x < lo;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  const vf round = Ops::splat(12582912.0f);
  vf n = (x * Ops::splat(1.44269504088896341f) + round) - round;
  vf r = (x - n * Ops::splat(0.693145751953125f)) - n * Ops::splat(1.42860682030941723212e-6f);
  vf p = Ops::splat(1.0f / 5040.0f);
  p = p * r + Ops::splat(1.0f / 720.0f);
  p = p * r + Ops::splat(1.0f / 120.0f);
  p = p * r + Ops::splat(1.0f / 24.0f);
  p = p * r + Ops::splat(1.0f / 6.0f);
  p = p * r + Ops::splat(0.5f);
  p = p * r + Ops::splat(1.0f);
  p = p * r + Ops::splat(1.0f);
  vf y;
  if constexpr (requires { Ops::scale_pow2(p, n); }) {
    y = Ops::scale_pow2(p, n);
  } else {
    vi ni = __builtin_convertvector(n, vi);
    vi half = ni >> 1;  // 2^n as 2^half * 2^(n - half): n = 128 does not fit one exponent field
    vf scale_a = reinterpret_cast<vf>((half + 127) << 23);
    vf scale_b = reinterpret_cast<vf>((ni - half + 127) << 23);
    y = p * scale_a * scale_b;
  }
  return underflow ? Ops::splat(0.0f) : y;
}

// Vectors of W floats (and W int32 for exp's exponent bits); the loads and stores may alias floats.
template <int W>
struct Vectors {
  typedef float f __attribute__((vector_size(W * sizeof(float))));
  typedef int32_t i __attribute__((vector_size(W * sizeof(int32_t))));
  typedef float f_mem __attribute__((vector_size(W * sizeof(float)), __may_alias__));
};

// The Tiles parameter of attention_schedule.h's BlockwiseAttention for vectors of W floats and
// micro-tiles of kMR rows x NR vectors, in 48 x 48 score tiles (multiples of the micro-tile rows and of
// every vector width; a query tile, its output and the key/value tiles of head size 128 stay within
// L1 + L2 of one core).
template <int W, int NR>
struct MicroTiles {
  static constexpr int kW = W;    // floats per vector
  static constexpr int kNR = NR;  // vectors per micro-tile row
  static constexpr int kMR = 6;   // rows per micro-tile
  static constexpr int kRows = kMR;
  static constexpr int kBlockQ = 8 * kMR;
  static constexpr int kBlockK = 8 * kMR;
  static_assert(kNR >= 1 && kNR <= 4, "product() dispatches 1 to 4 vectors per micro-tile row");
  static_assert(kBlockK % kW == 0);

  using vf = typename Vectors<W>::f;
  using vi = typename Vectors<W>::i;

  // Tile loads and stores are aligned: every tile lives in 64-byte aligned scratch with row strides
  // that are multiples of kW (memcpy here made g++ split each access in two 128-bit halves on AVX2).
  using vf_mem = typename Vectors<W>::f_mem;
  static vf load(const float* p) { return *reinterpret_cast<const vf_mem*>(p); }
  static void store(float* p, vf v) { *reinterpret_cast<vf_mem*>(p) = v; }
  template <size_t... I>
  static vf splat_lanes(float x, std::index_sequence<I...>) {
    return vf{((void)I, x)...};
  }
  static vf splat(float x) {  // one broadcast (vf{} + x compiles to more)
    return splat_lanes(x, std::make_index_sequence<kW>{});
  }
  static vf vmax(vf a, vf b) { return a > b ? a : b; }
#ifdef __AVX512F__
  // p * 2^n for vexp_lanes; only in the AVX-512 path's translation unit (attention_avx512.cpp).
  static vf scale_pow2(vf p, vf n) requires(W == 16) {
    // The masked form with every lane set: _mm512_scalef_ps's undefined pass-through trips g++ 12's
    // -Wmaybe-uninitialized.
    const __m512 pm = reinterpret_cast<__m512>(p);
    return reinterpret_cast<vf>(
        _mm512_mask_scalef_ps(pm, static_cast<__mmask16>(0xffff), pm, reinterpret_cast<__m512>(n)));
  }
#endif
  // Horizontal max and sum as log2(kW) halving steps: a serial lane-by-lane loop cost as much as the
  // tile products at 16 lanes (one max and one sum per score row and key block).
  static float hmax(vf v) {
    return reduce<kW>(v, [](auto a, auto b) { return a > b ? a : b; });
  }
  static float hsum(vf v) {
    return reduce<kW>(v, [](auto a, auto b) { return a + b; });
  }
  template <class V, size_t... I>
  static auto lower_half(V v, std::index_sequence<I...>) {
    return __builtin_shufflevector(v, v, I...);
  }
  template <class V, size_t... I>
  static auto upper_half(V v, std::index_sequence<I...>) {
    return __builtin_shufflevector(v, v, (I + sizeof...(I))...);
  }
  template <int N, class V, class Op>
  static float reduce(V v, Op op) {
    if constexpr (N == 1) {
      return v[0];
    } else {
      constexpr auto half = std::make_index_sequence<N / 2>{};
      return reduce<N / 2>(op(lower_half(v, half), upper_half(v, half)), op);
    }
  }

  // vexp (vec_math.h) on a vector: the same bits lane by lane.
  static vf vexp(vf x) {
    return vexp_lanes<MicroTiles>(x);
  }

  // C[kMR, NV*kW] (+)= op(A)[kMR, K] . B[K, NV*kW], B rows ldb apart. op(A)[r, k] is a[r * lda + k],
  // or a[k * lda + r] when TransA (P^T and dS^T are read from P and dS in place, never transposed).
  // Accumulate=false overwrites C (score tiles), true adds to it (O, dQ, dK, dV).
  template <bool TransA, bool Accumulate, int NV>
  static void micro_tile(float* __restrict c, int64_t ldc, const float* __restrict a, int64_t lda,
                         const float* __restrict b, int64_t ldb, int K) {
    vf acc[kMR][NV];
    for (int r = 0; r < kMR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = Accumulate ? load(c + r * ldc + v * kW) : vf{};
    for (int k = 0; k < K; ++k) {
      vf bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = load(b + k * ldb + v * kW);
      for (int r = 0; r < kMR; ++r) {
        vf x = splat(TransA ? a[k * lda + r] : a[r * lda + k]);
        for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
      }
    }
    for (int r = 0; r < kMR; ++r)
      for (int v = 0; v < NV; ++v) store(c + r * ldc + v * kW, acc[r][v]);
  }

  // C[M, N] (+)= op(A)[M, K] . B[K, N]; M a multiple of kMR, N a multiple of kW. Column chunks of kNR
  // vectors (a narrower last chunk when N is not a multiple of kNR vectors).
  template <bool TransA, bool Accumulate>
  static void product(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                      int K, int N) {
    for (int r0 = 0; r0 < M; r0 += kMR) {
      float* cr = c + r0 * ldc;
      const float* ar = TransA ? a + r0 : a + r0 * lda;
      for (int c0 = 0; c0 < N; c0 += kNR * kW) {
        const int nv = (N - c0) / kW < kNR ? (N - c0) / kW : kNR;
        switch (nv) {
          case 1:
            micro_tile<TransA, Accumulate, 1>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
          case 2:
            micro_tile<TransA, Accumulate, 2 <= kNR ? 2 : 1>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
          case 3:
            micro_tile<TransA, Accumulate, 3 <= kNR ? 3 : 1>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
          default:
            micro_tile<TransA, Accumulate, 4 <= kNR ? 4 : 1>(cr + c0, ldc, ar, lda, b + c0, ldb, K);
            break;
        }
      }
    }
  }

  // S[M, kBlockK] = A[M, :D] . Bt[D, kBlockK] (a transposed key or value block); M a multiple of kRows.
  static void abt(float* s, const float* a, int64_t lda, const float* bt, int D, int M) {
    product<false, false>(s, kBlockK, a, lda, bt, kBlockK, M, D, kBlockK);
  }
  // C[M, N] += op(A)[M, K] . B[K, N], op(A) = A or A^T.
  template <bool TransA>
  static void ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                 int K, int N) {
    product<TransA, true>(c, ldc, a, lda, b, ldb, M, K, N);
  }
};

}  // namespace odyssey::attention_tiles
