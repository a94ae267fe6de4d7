// The bf16 conversion's avx512_bf16 path: RNE with VCVTNE2PS2BF16 (two 16-float vectors to one vector of
// 32 bf16), the instruction whose semantics are the engine's canonical rounding (core/bf16.h); SR and
// widening as the avx512 path (the instruction set has no stochastic conversion). Compiled for
// AVX-512F + AVX512_BF16 whatever the build machine (bf16_convert_isa.h).
#include "odyssey/kernels/bf16_convert_prelude.h"

#if ODYSSEY_BF16_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")

#include "odyssey/kernels/bf16_convert_lanes.h"

namespace odyssey::bf16_paths {
namespace {

using L = bf16_lanes::Lanes<16>;

void nearest(const float* x, bf16* y, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // Lanes 0-15 of the result come from the second operand.
    const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(y + i, reinterpret_cast<__m512i>(r));
  }
  for (; i + 16 <= n; i += 16) {
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), reinterpret_cast<__m256i>(r));
  }
  for (; i < n; ++i) y[i] = to_bf16(x[i]);
}

}  // namespace

constinit const Bf16ConvertPath avx512_bf16{"avx512_bf16", &nearest, &L::stochastic, &L::widen};

}  // namespace odyssey::bf16_paths

#pragma GCC pop_options
#endif
