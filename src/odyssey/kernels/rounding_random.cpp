// Philox4x32-10 evaluated for 16 counters at once (philox_lanes.h). The index -> (counter, word) map makes
// the 64 words of one call land in index order, so they are stored with plain vector copies instead of a 4x16
// transpose.
#include "odyssey/kernels/rounding_random.h"

#include <algorithm>

#include "odyssey/core/error.h"
#include "odyssey/kernels/philox_lanes.h"

namespace odyssey {

namespace {

constexpr int kLanes = kPhiloxLanes;
constexpr uint64_t kChunk = 4 * kLanes;  // indices per philox_lanes call

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
