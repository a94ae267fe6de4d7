// Philox4x32-10: a counter-based generator. Random number i of stream (seed, stream) is a pure
// function of (seed, stream, i), so any rank can produce any slice of a random tensor without
// producing the rest: initialisation and sampling do not depend on the parallel layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace odyssey {

// Four 32-bit random words for counter (c0..c3) under key (k0, k1).
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Uniform float in [0, 1) with 24 random bits, element `index` of stream (seed, stream).
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);

// out[i] = mean + std * N(0,1), element (offset + i) of stream (seed, stream). Box-Muller.
void philox_fill_normal(float* out, size_t n, float mean, float std, uint64_t seed, uint64_t stream,
                        uint64_t offset = 0);

}  // namespace odyssey
