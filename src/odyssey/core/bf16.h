// bf16: the upper 16 bits of an IEEE fp32 (1 sign, 8 exponent, 7 stored mantissa bits), the storage
// type of the bf16 precision policy (mixed-precision.md §1). This header is the scalar definition of
// the engine's two roundings, which every vectorized path (kernels/bf16_convert.h) reproduces bit for
// bit over all 2^32 inputs:
//   round to nearest even (RNE): the semantics of AVX512_BF16's VCVTNEPS2BF16 — ties to even, input
//     denormals read as zero and results flushed (sign kept), ±Inf kept, a NaN becomes a quiet NaN
//     (payload truncated, quiet bit set), MXCSR not consulted;
//   stochastic rounding (SR): the magnitude rounds up when the 16 bits cut off exceed a uniform 16-bit
//     r, so it rounds up with probability (cut bits) / 2^16 and E[result] = x exactly; Inf, NaN and
//     denormals as RNE. r is a pure function of a key and the element index (Philox4x32-10), so a run,
//     a resume and any split of a tensor into calls round alike (spec §10 pitfall 13).
// bf16 -> fp32 is exact. A bf16 carries no arithmetic: widen it to float.
#pragma once

#include <bit>
#include <cstdint>

namespace odyssey {

// Trivial (no default initialiser), so arrays of it are plain memory like float's.
struct bf16 {
  uint16_t bits;
  friend constexpr bool operator==(bf16, bf16) = default;
};
static_assert(sizeof(bf16) == 2);

constexpr float bf16_to_float(bf16 x) {
  return std::bit_cast<float>(uint32_t{x.bits} << 16);
}

// RNE/FTZ of the fp32 bit pattern f.
constexpr uint16_t bf16_bits_nearest(uint32_t f) {
  const uint32_t exponent = f & 0x7F800000u;
  if (exponent == 0x7F800000u) {  // Inf stays, NaN turns quiet
    return static_cast<uint16_t>((f & 0x007FFFFFu) ? (f >> 16) | 0x0040u : f >> 16);
  }
  if (exponent == 0) return static_cast<uint16_t>((f >> 16) & 0x8000u);  // ±0 and denormals: ±0
  // Adding 0x7FFF rounds up when the cut bits exceed half an ulp; bit 16 (the kept lsb) breaks ties
  // to even. A carry out of the mantissa moves to the next binade, the largest finite values to Inf.
  return static_cast<uint16_t>((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

// SR of the fp32 bit pattern f with the uniform 16-bit random r.
constexpr uint16_t bf16_bits_stochastic(uint32_t f, uint16_t r) {
  const uint32_t exponent = f & 0x7F800000u;
  if (exponent == 0x7F800000u || exponent == 0) return bf16_bits_nearest(f);
  return static_cast<uint16_t>((f >> 16) + ((f & 0xFFFFu) > r ? 1u : 0u));
}

constexpr bf16 to_bf16(float x) {
  return {bf16_bits_nearest(std::bit_cast<uint32_t>(x))};
}

// x rounded to the nearest bf16 and widened back: what the bf16 emulation (spec §9) stores where the
// bf16 policy stores a bf16 tensor.
constexpr float round_to_bf16(float x) {
  return bf16_to_float(to_bf16(x));
}

// The stream an SR call draws from (spec §1: seed, step, purpose, tensor or bucket, element index).
// Element i of a call uses index offset + i; indices stay below kBf16RoundingIndexLimit.
struct Bf16RoundingKey {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t purpose = 0;  // what is rounded (the model copy, a wire payload, ...): separate streams
  uint32_t tensor = 0;   // tensor, bucket or unit
  uint64_t offset = 0;
};
constexpr uint64_t kBf16RoundingIndexLimit = uint64_t{1} << 35;
// Xored into the seed to form the Philox key, so these streams differ from the initialisation and the
// quantizers' streams drawn from the same seed.
constexpr uint64_t kBf16RoundingSeedTag = 0xBF16'5EED'0000'0001ull;

// The uniform 16-bit r of index j (j < 2^35): with c = j / 128 and i = j % 128,
//   half (i / 64: 0 low, 1 high) of word (i % 64) / 16 of
//   philox4x32(counter = (16 c + i % 16, tensor, step, purpose), key = seed ^ kBf16RoundingSeedTag).
// (A chunk of 128 indices is 16 Philox counters; 16 consecutive indices take the same word and half of
// 16 consecutive counters, so a vectorized path reads them as one vector of 32-bit lanes.)
uint16_t bf16_rounding_random(const Bf16RoundingKey& key, uint64_t j);

// SR of x as element `i` of a call with `key` (index key.offset + i).
bf16 to_bf16_stochastic(float x, const Bf16RoundingKey& key, uint64_t i);

}  // namespace odyssey
