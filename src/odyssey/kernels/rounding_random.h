// Random numbers for stochastic rounding. SDP4Bit seeds curand from clock(), so its runs cannot be
// repeated; here the uniform for element `index` of a bucket is a pure function of
// (seed, step, rank, bucket, index) through Philox4x32-10 (spec §9 pitfall 8). A run is then
// reproducible, every rank draws an independent stream, and a bucket quantized in pieces (pipeline
// slices, per-destination chunks) gets the same numbers as when quantized whole.
#pragma once

#include <cstddef>
#include <cstdint>

namespace odyssey {

// Which stream a quantization call draws from. `offset` is the bucket index of the call's element 0,
// so element i of the call uses index offset + i.
struct RoundingKey {
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t rank = 0;
  uint32_t bucket = 0;
  uint64_t offset = 0;
};

// Indices must stay below this (the first counter word is 32 bits and serves 16 indices).
constexpr uint64_t kRoundingIndexLimit = uint64_t{1} << 36;
// Xored into the seed to form the Philox key, so these streams differ from the initialisation streams
// (core/rng.h) drawn from the same seed.
constexpr uint64_t kRoundingSeedTag = 0x5DB4A11E0C0FFEE5ull;

// u[i] = uniform in [0, 1) with 24 random bits for index j = key.offset + first + i, i < count:
//   word (j / 16) % 4 of philox4x32(counter = (16 (j / 64) + j % 16, bucket, step, rank),
//                                   key = seed ^ kRoundingSeedTag, low word first),
//   u = (word >> 8) · 2^-24.
// (Indices in runs of 64 share 16 counters, so a vectorized generator writes them without a transpose.)
void rounding_uniforms(const RoundingKey& key, uint64_t first, size_t count, float* u);

}  // namespace odyssey
