// Philox4x32-10 evaluated for 16 counters at once, written lane-wise so g++ vectorizes the 32x32->64
// multiplies; bitwise the same function as core/rng.h's philox4x32 (checked in test_quantize). The
// index -> (counter, word) map makes the 64 words of one call land in index order, so they are stored
// with plain vector copies instead of a 4x16 transpose.
#include "odyssey/kernels/rounding_random.h"

#include <algorithm>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

constexpr int kLanes = 16;
constexpr uint64_t kChunk = 4 * kLanes;  // indices per philox_lanes call
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

// x[w][l] = word w of philox(counter = (block0 + l, c1, c2, c3), key) for l < kLanes.
void philox_lanes(uint32_t block0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                  uint32_t (&x)[4][kLanes]) {
  for (int l = 0; l < kLanes; ++l) {
    x[0][l] = block0 + uint32_t(l);
    x[1][l] = c1;
    x[2][l] = c2;
    x[3][l] = c3;
  }
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
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

void rounding_uniforms(const RoundingKey& key, uint64_t first, size_t count, float* u) {
  if (count == 0) return;
  const uint64_t begin = key.offset + first, end = begin + count;
  ODY_CHECK(end <= kRoundingIndexLimit && end > begin,
            "stochastic rounding: element index {} of bucket {} is beyond the limit 2^36", end - 1,
            key.bucket);
  const uint64_t seed = key.seed ^ kRoundingSeedTag;
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  uint32_t x[4][kLanes];
  // Chunk c holds indices [64c, 64c + 64): one philox_lanes call, its words in index order.
  for (uint64_t chunk = begin / kChunk; chunk * kChunk < end; ++chunk) {
    philox_lanes(uint32_t(chunk * kLanes), key.bucket, key.step, key.rank, k0, k1, x);
    const uint64_t base = chunk * kChunk, lo = std::max(begin, base), hi = std::min(end, base + kChunk);
    const uint32_t* words = &x[0][0] + (lo - base);
    float* dst = u + (lo - begin);
#pragma omp simd
    for (uint64_t i = 0; i < hi - lo; ++i) dst[i] = float(words[i] >> 8) * (1.0f / 16777216.0f);
  }
}

}  // namespace odyssey
