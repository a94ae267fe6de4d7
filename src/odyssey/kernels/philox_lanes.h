// Philox4x32-10 for 16 consecutive counters at once, written lane-wise so g++ vectorizes the
// 32x32->64 multiplies for whatever ISA the including translation unit targets; bitwise the same
// function as core/rng.h's philox4x32 (test_quantize, test_bf16_convert). Internal linkage: the bf16
// conversion paths include it under their target pragmas, and a shared inline copy compiled for a wider
// ISA could otherwise be the one the linker keeps (attention_isa.h explains the hazard).
#pragma once

#include <cstdint>

namespace odyssey {
namespace {

constexpr int kPhiloxLanes = 16;

// x[w][l] = word w of philox4x32(counter = (block0 + l, c1, c2, c3), key = (k0, k1)) for l < 16.
[[maybe_unused]] inline void philox_lanes(uint32_t block0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                          uint32_t k1, uint32_t (&x)[4][kPhiloxLanes]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int l = 0; l < kPhiloxLanes; ++l) {
    x[0][l] = block0 + uint32_t(l);
    x[1][l] = c1;
    x[2][l] = c2;
    x[3][l] = c3;
  }
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < kPhiloxLanes; ++l) {
      const uint64_t p0 = uint64_t(kMul0) * x[0][l], p1 = uint64_t(kMul1) * x[2][l];
      x[0][l] = uint32_t(p1 >> 32) ^ x[1][l] ^ k0;
      x[1][l] = uint32_t(p1);
      x[2][l] = uint32_t(p0 >> 32) ^ x[3][l] ^ k1;
      x[3][l] = uint32_t(p0);
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
}

}  // namespace
}  // namespace odyssey
