// Bulk fp32 <-> bf16 conversion: core/bf16.h's RNE/FTZ and stochastic rounding over arrays, one compiled
// path per vector ISA (mixed-precision.md §5.4), every one bitwise equal to the scalar definition for all
// 2^32 inputs (test_bf16_convert):
//   path          RNE                                    SR, widening
//   avx512_bf16   VCVTNE2PS2BF16 (two 16-float vectors   as avx512
//                 -> one 32-bf16 vector)
//   avx512        AVX-512F integer arithmetic, 16 lanes  16 lanes
//   avx2          AVX2 integer arithmetic, 8 lanes       8 lanes
//   portable      the build's baseline, 4 lanes          4 lanes
// Each call runs the widest path the CPU supports (AVX512_BF16: CPUID leaf 7 sub-leaf 1, EAX bit 5), or
// the one the environment variable ODYSSEY_BF16_ISA names, read at the first call (an unknown or
// unsupported name is an error naming it). A run says which path it uses (bf16_convert_path().name).
#pragma once

#include <cstddef>
#include <vector>

#include "odyssey/core/bf16.h"

namespace odyssey {

// One compiled path; its functions run on the calling thread only.
struct Bf16ConvertPath {
  const char* name;
  void (*nearest)(const float* x, bf16* y, size_t n);
  // Element i is rounded as index key.offset + i of key's stream.
  void (*stochastic)(const float* x, bf16* y, size_t n, const Bf16RoundingKey& key);
  void (*widen)(const bf16* x, float* y, size_t n);
};

// The path the conversions below run.
const Bf16ConvertPath& bf16_convert_path();
// Every path of this build, widest first, and whether this CPU runs it.
struct Bf16ConvertPathSupport {
  const Bf16ConvertPath* path;
  bool runs_here;
};
const std::vector<Bf16ConvertPathSupport>& bf16_convert_paths();

// y[i] = RNE/FTZ(x[i]); y[i] = SR(x[i]) as index key.offset + i; y[i] = x[i] widened (exact). Large
// calls outside a parallel region spread over the OpenMP threads (the bits do not depend on the split).
void convert_to_bf16(const float* x, bf16* y, size_t n);
void convert_to_bf16_stochastic(const float* x, bf16* y, size_t n, const Bf16RoundingKey& key);
void convert_to_float(const bf16* x, float* y, size_t n);

}  // namespace odyssey
