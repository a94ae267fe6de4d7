// The bf16 conversion paths' loops (bf16_convert.h), written once on GCC vectors of W 32-bit lanes: a
// path's translation unit includes this under its target pragma and instantiates it with its width. The
// integer arithmetic is core/bf16.h's, lane by lane, so the bits are the scalar definition's; ragged
// tails go through the scalar definition itself. Internal linkage: each path keeps its own copy
// (attention_isa.h explains why a shared inline copy compiled for a wider ISA is a hazard).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "odyssey/core/bf16.h"
#include "odyssey/kernels/philox_lanes.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace odyssey::bf16_lanes {
namespace {

// The vector types outside Lanes: g++ 12 refuses __builtin_convertvector on a vector typedef declared
// inside the class template that uses it.
template <int W>
struct Vectors {
  typedef uint32_t u __attribute__((vector_size(W * 4)));
  typedef int32_t s __attribute__((vector_size(W * 4)));
  typedef uint16_t h __attribute__((vector_size(W * 2)));
};

template <int W>
struct Lanes {
  using vu = typename Vectors<W>::u;
  using vs = typename Vectors<W>::s;
  using vh = typename Vectors<W>::h;
  static_assert(kPhiloxLanes % W == 0);

  static vu splat(uint32_t x) { return vu{} + x; }
  static vu load_bits(const void* p) {
    vu v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store_halves(bf16* p, vu v) {
    const vh h = __builtin_convertvector(v, vh);
    std::memcpy(p, &h, sizeof h);
  }

  // Inf/NaN, zero/denormal, or finite normal: the result for the first two kinds (core/bf16.h), with
  // `normal` standing for the third.
  static vu special_or(vu f, vu normal) {
    const vu exponent = f & splat(0x7F800000u);
    const vu nan_or_inf = (f & splat(0x007FFFFFu)) != 0 ? (f >> 16) | splat(0x40u) : f >> 16;
    const vu zero = (f >> 16) & splat(0x8000u);
    return exponent == splat(0x7F800000u) ? nan_or_inf : exponent == 0 ? zero : normal;
  }
  static vu nearest_bits(vu f) { return special_or(f, (f + splat(0x7FFFu) + ((f >> 16) & splat(1u))) >> 16); }
  // r holds the 16-bit randoms in the low halves of its lanes. Both sides are below 2^16, so the
  // signed compare is the unsigned one (AVX2 has only the signed).
  static vu stochastic_bits(vu f, vu r) {
    const vu up = reinterpret_cast<vs>(f & splat(0xFFFFu)) > reinterpret_cast<vs>(r) ? splat(1u) : splat(0u);
    return special_or(f, (f >> 16) + up);
  }

  static void nearest(const float* x, bf16* y, size_t n) {
    size_t i = 0;
    for (; i + W <= n; i += W) store_halves(y + i, nearest_bits(load_bits(x + i)));
    for (; i < n; ++i) y[i] = to_bf16(x[i]);
  }

  static void widen(const bf16* x, float* y, size_t n) {
    size_t i = 0;
    for (; i + W <= n; i += W) {
      vh h;
      std::memcpy(&h, x + i, sizeof h);
      const vu f = __builtin_convertvector(h, vu) << 16;
      std::memcpy(y + i, &f, sizeof f);
    }
    for (; i < n; ++i) y[i] = bf16_to_float(x[i]);
  }

  // Index j = key.offset + i; chunk c = j / 128 is one philox_lanes call (bf16_rounding_random's map):
  // its 8 groups of 16 indices are (word g % 4, half g / 4) of the 16 lanes.
  static void stochastic(const float* x, bf16* y, size_t n, const Bf16RoundingKey& key) {
    if (n == 0) return;
    const uint64_t begin = key.offset, end = begin + n;
    if (end > kBf16RoundingIndexLimit || end < begin) {  // the scalar definition throws, naming it
      y[n - 1] = to_bf16_stochastic(x[n - 1], key, n - 1);
      return;
    }
    const uint64_t seed = key.seed ^ kBf16RoundingSeedTag;
    uint32_t words[4][kPhiloxLanes];
    for (uint64_t chunk = begin / 128; chunk * 128 < end; ++chunk) {
      philox_lanes(uint32_t(16 * chunk), key.tensor, key.step, key.purpose, uint32_t(seed),
                   uint32_t(seed >> 32), words);
      for (int g = 0; g < 8; ++g) {
        const uint64_t g0 = chunk * 128 + 16 * uint64_t(g);  // index of the group's first element
        const uint32_t* w = words[g % 4];
        const int shift = g < 4 ? 0 : 16;
        if (g0 >= begin && g0 + 16 <= end) {
          const float* xg = x + (g0 - begin);
          bf16* yg = y + (g0 - begin);
          for (int l = 0; l < kPhiloxLanes; l += W)
            store_halves(yg + l,
                         stochastic_bits(load_bits(xg + l), (load_bits(w + l) >> shift) & splat(0xFFFFu)));
        } else {
          for (uint64_t j = std::max(g0, begin); j < std::min(g0 + 16, end); ++j) {
            const uint16_t r = static_cast<uint16_t>(w[j - g0] >> shift);
            y[j - begin] = {bf16_bits_stochastic(std::bit_cast<uint32_t>(x[j - begin]), r)};
          }
        }
      }
    }
  }
};

}  // namespace
}  // namespace odyssey::bf16_lanes
