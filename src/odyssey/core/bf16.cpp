#include "odyssey/core/bf16.h"

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"

namespace odyssey {

uint16_t bf16_rounding_random(const Bf16RoundingKey& key, uint64_t j) {
  ODY_CHECK(j < kBf16RoundingIndexLimit,
            "stochastic bf16 rounding: element index {} of tensor {} is beyond 2^35", j, key.tensor);
  const uint64_t seed = key.seed ^ kBf16RoundingSeedTag;
  const uint64_t chunk = j / 128, i = j % 128;
  const auto words = philox4x32({uint32_t(16 * chunk + i % 16), key.tensor, key.step, key.purpose},
                                {uint32_t(seed), uint32_t(seed >> 32)});
  const uint32_t word = words[(i % 64) / 16];
  return static_cast<uint16_t>(i < 64 ? word : word >> 16);
}

bf16 to_bf16_stochastic(float x, const Bf16RoundingKey& key, uint64_t i) {
  const uint64_t j = key.offset + i;
  return {bf16_bits_stochastic(std::bit_cast<uint32_t>(x), bf16_rounding_random(key, j))};
}

}  // namespace odyssey
