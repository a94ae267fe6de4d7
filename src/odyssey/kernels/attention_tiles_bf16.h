// The attention kernel's AVX512_BF16 tiles (attention_avx512_bf16.cpp): the AVX-512 path's micro-tiles
// (16-float vectors, 6 x 4 micro-tiles, 48 x 48 score tiles: everything but the products is theirs) with
// the products as bf16 dot products, VDPBF16PS: acc[16 fp32] += a[pair] . b[16 pairs], each lane adding
// the two exact products of a pair of bf16 values to its fp32 accumulator (mixed-precision.md §5.4).
//
// The schedule (attention_schedule.h, Elem = bf16) keeps its tiles in fp32 holding bf16 values: q, k,
// v and dO rounded when packed, P and dS rounded before their products. Each product packs its
// operands into VDPBF16PS's pair layout (pairs along the reduction dimension) as it starts: A [M, K]
// into rows of K/2 pairs, op(A) = A^T and B [K, N] into K/2 rows of pairs (lane j of row p holds
// elements 2p and 2p + 1 of column j), in chunks of at most 2 kMaxPairs along K. Packing a bf16 value
// held in an fp32 is exact (its low 16 bits are zero). A K that is odd gets a zero partner.
//
// Summation order: pairs in order along K, each pair's two products added at once; the emulation
// (the same schedule on MicroTiles<16, 4>) adds them one at a time, so the two differ in the last bits.
#pragma once

#include <cstdint>

#include <immintrin.h>

#include "odyssey/kernels/attention_tiles.h"

namespace odyssey::attention_tiles {

struct Bf16DotTiles : MicroTiles<16, 4> {
  using Base = MicroTiles<16, 4>;
  static constexpr int kMaxRows = kBlockQ > kBlockK ? kBlockQ : kBlockK;  // M of every product
  static constexpr int kMaxPairs = 128;                                   // K chunk: 256 values
  static_assert(kBlockQ % kW == 0 && kBlockK % kW == 0, "A^T packs 16 rows of C at a time");

  // dst[r * ldd + p] = (src[r, 2p], src[r, 2p + 1]) for rows r < rows, pairs p < (K + 1) / 2: row-major
  // A as pairs; K values per row from src (the partner of an odd K's last value is 0).
  static void pack_rows(uint32_t* dst, int ldd, const float* src, int64_t lds, int rows, int K) {
    for (int r = 0; r < rows; ++r) {
      const float* s = src + r * lds;
      uint32_t* d = dst + r * ldd;
      int k = 0;
      for (; k + 32 <= K; k += 32) {  // lanes 0-15 of the result come from the second operand
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + k + 16), _mm512_loadu_ps(s + k));
        _mm512_storeu_si512(d + k / 2, reinterpret_cast<__m512i>(v));
      }
      if (k + 16 <= K) {
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(s + k));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k / 2), reinterpret_cast<__m256i>(v));
        k += 16;
      }
      for (; k < K; k += 2) d[k / 2] = bits(s[k]) >> 16 | (k + 1 < K ? bits(s[k + 1]) & 0xffff0000u : 0u);
    }
  }

  // dst[p * ldd + j] = (src[2p, j], src[2p + 1, j]) for pairs p < (K + 1) / 2, columns j < N (a
  // multiple of 16): B, or A read transposed, as rows of pairs; K rows of src.
  static void pack_cols(uint32_t* dst, int ldd, const float* src, int64_t lds, int K, int N) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int p = 0; p < (K + 1) / 2; ++p) {
      const float* lo = src + 2 * p * lds;
      const float* hi = lo + lds;
      const bool has_hi = 2 * p + 1 < K;
      for (int j = 0; j < N; j += kW) {
        // The masked form with every lane set: _mm512_srli_epi32's undefined pass-through trips g++ 12's
        // -Wmaybe-uninitialized.
        __m512i v = _mm512_maskz_srli_epi32(static_cast<__mmask16>(0xffff), _mm512_loadu_si512(lo + j), 16);
        if (has_hi) v = _mm512_or_si512(v, _mm512_and_si512(_mm512_loadu_si512(hi + j), high));
        _mm512_storeu_si512(dst + p * ldd + j, v);
      }
    }
  }

  // C[kMR, NV*16] (+)= A pairs . B pairs over `pairs` pairs; a: row r's pair p at a[r * lda + p], or
  // a[p * lda + r] when TransA; b: pair row p at b + p * ldb. load_c: accumulate onto C, else overwrite.
  template <bool TransA, int NV>
  static void dot_tile(float* __restrict c, int64_t ldc, const uint32_t* __restrict a, int lda,
                       const uint32_t* __restrict b, int ldb, int pairs, bool load_c) {
    __m512 acc[kMR][NV];
    for (int r = 0; r < kMR; ++r)
      for (int v = 0; v < NV; ++v)
        acc[r][v] = load_c ? _mm512_loadu_ps(c + r * ldc + v * kW) : _mm512_setzero_ps();
    for (int p = 0; p < pairs; ++p) {
      __m512bh bv[NV];
      for (int v = 0; v < NV; ++v)
        bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * ldb + v * kW));
      for (int r = 0; r < kMR; ++r) {
        const uint32_t pair = TransA ? a[p * lda + r] : a[r * lda + p];
        const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
      }
    }
    for (int r = 0; r < kMR; ++r)
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + v * kW, acc[r][v]);
  }

  // C[M, N] (+)= op(A)[M, K] . B[K, N] (Base::product's contract; M <= kMaxRows a multiple of kMR, N a
  // multiple of 16), on bf16 dot products.
  template <bool TransA, bool Accumulate>
  static void product(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                      int K, int N) {
    alignas(64) uint32_t ap[kMaxRows * kMaxPairs];
    alignas(64) uint32_t bp[kMaxPairs * kNR * kW];
    for (int k0 = 0; k0 < K; k0 += 2 * kMaxPairs) {
      const int kc = K - k0 < 2 * kMaxPairs ? K - k0 : 2 * kMaxPairs, pairs = (kc + 1) / 2;
      const bool load_c = Accumulate || k0 > 0;
      // A's pairs: [M][pairs], or [pairs][M] read transposed.
      if (TransA)
        pack_cols(ap, M, a + k0 * lda, lda, kc, M);
      else
        pack_rows(ap, pairs, a + k0, lda, M, kc);
      const int lda_p = TransA ? M : pairs;
      for (int c0 = 0; c0 < N; c0 += kNR * kW) {
        const int nv = (N - c0) / kW < kNR ? (N - c0) / kW : kNR;
        pack_cols(bp, nv * kW, b + k0 * ldb + c0, ldb, kc, nv * kW);
        for (int r0 = 0; r0 < M; r0 += kMR) {
          float* cr = c + r0 * ldc + c0;
          const uint32_t* ar = TransA ? ap + r0 : ap + r0 * lda_p;
          switch (nv) {
            case 1:
              dot_tile<TransA, 1>(cr, ldc, ar, lda_p, bp, nv * kW, pairs, load_c);
              break;
            case 2:
              dot_tile<TransA, 2>(cr, ldc, ar, lda_p, bp, nv * kW, pairs, load_c);
              break;
            case 3:
              dot_tile<TransA, 3>(cr, ldc, ar, lda_p, bp, nv * kW, pairs, load_c);
              break;
            default:
              dot_tile<TransA, 4>(cr, ldc, ar, lda_p, bp, nv * kW, pairs, load_c);
              break;
          }
        }
      }
    }
  }

  // The schedule's two products (MicroTiles' signatures).
  static void abt(float* s, const float* a, int64_t lda, const float* bt, int D, int M) {
    product<false, false>(s, kBlockK, a, lda, bt, kBlockK, M, D, kBlockK);
  }
  template <bool TransA>
  static void ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                 int K, int N) {
    product<TransA, true>(c, ldc, a, lda, b, ldb, M, K, N);
  }

 private:
  static uint32_t bits(float x) {
    uint32_t u;
    __builtin_memcpy(&u, &x, sizeof u);
    return u;
  }
};

}  // namespace odyssey::attention_tiles
