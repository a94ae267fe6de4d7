// The unnormalised 32-point Walsh-Hadamard transform that TLq-HS applies to gradients before
// quantizing them (spec §1.4): Sylvester H32, entries H[i][j] = (-1)^popcount(i & j), applied to every
// consecutive block of 32 floats. H·H = 32·I, so the inverse is the same transform followed by ×1/32.
//
// The block transform is inline so the quantizer can fuse it into its per-group loop. It runs the
// butterflies in the spec's order (strides 1, 2, 4, 8, 16), each pair as (a + b, a - b), so the result
// is bitwise that of the plain scalar butterfly loop.
#pragma once

#include <cstddef>
#include <cstring>

namespace odyssey {

namespace hadamard_detail {

typedef float Vec16 __attribute__((vector_size(64)));

// One butterfly stage of stride h < 16 inside a 16-lane vector: lane j pairs with lane j ^ h.
// Lanes with bit h clear get x[j] + x[j+h]; lanes with it set get x[j-h] - x[j]. Multiplying by ±1 is
// exact, so swap + sign * x rounds exactly like the scalar a + b and a - b. In place, by reference: a
// 64-byte vector passed or returned by value has no fixed ABI without AVX-512 (g++ -Wpsabi on AVX2 hosts).
template <int h>
inline void stage(Vec16& v) {
  constexpr float p = 1.0f, m = -1.0f;
  Vec16 swapped, sign;
  if constexpr (h == 1) {
    swapped = __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    sign = Vec16{p, m, p, m, p, m, p, m, p, m, p, m, p, m, p, m};
  } else if constexpr (h == 2) {
    swapped = __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    sign = Vec16{p, p, m, m, p, p, m, m, p, p, m, m, p, p, m, m};
  } else if constexpr (h == 4) {
    swapped = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    sign = Vec16{p, p, p, p, m, m, m, m, p, p, p, p, m, m, m, m};
  } else {
    static_assert(h == 8);
    swapped = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    sign = Vec16{p, p, p, p, p, p, p, p, m, m, m, m, m, m, m, m};
  }
  v = swapped + v * sign;
}

}  // namespace hadamard_detail

// out[0..32) = H32 in[0..32); in may equal out.
inline void hadamard32_block(const float* in, float* out) {
  using hadamard_detail::stage;
  hadamard_detail::Vec16 lo, hi;
  std::memcpy(&lo, in, sizeof lo);
  std::memcpy(&hi, in + 16, sizeof hi);
  const auto strides_below_16 = [](hadamard_detail::Vec16& v) {
    stage<1>(v);
    stage<2>(v);
    stage<4>(v);
    stage<8>(v);
  };
  strides_below_16(lo);
  strides_below_16(hi);
  const hadamard_detail::Vec16 sum = lo + hi, diff = lo - hi;  // stride 16: across the two halves
  std::memcpy(out, &sum, sizeof sum);
  std::memcpy(out + 16, &diff, sizeof diff);
}

// x[0..32) <- H32 x, in place.
inline void hadamard32_block(float* x) {
  hadamard32_block(x, x);
}

// x <- H32 x on each of the n / 32 consecutive blocks, in place; n must be a multiple of 32.
// Applying it twice gives 32·x (exactly in real arithmetic, within fp32 rounding here).
void hadamard32(float* x, size_t n);

}  // namespace odyssey
