#include "odyssey/core/rng.h"

#include <cmath>

namespace odyssey {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kMul0) * c[0];
    uint64_t p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

static std::array<uint32_t, 4> block(uint64_t seed, uint64_t stream, uint64_t block_index) {
  return philox4x32(
      {uint32_t(block_index), uint32_t(block_index >> 32), uint32_t(stream), uint32_t(stream >> 32)},
      {uint32_t(seed), uint32_t(seed >> 32)});
}

float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t word = block(seed, stream, index / 4)[index % 4];
  return float(word >> 8) * (1.0f / 16777216.0f);
}

// Element i uses words (2i, 2i+1) of the stream: two uniforms for one Box-Muller normal, so the value
// at an index never depends on where a fill started.
void philox_fill_normal(float* out, size_t n, float mean, float std, uint64_t seed, uint64_t stream,
                        uint64_t offset) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    uint64_t e = offset + i;
    auto w = block(seed, stream, e / 2);
    uint32_t a = w[(e % 2) * 2], b = w[(e % 2) * 2 + 1];
    double u1 = (double(a) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
    double u2 = double(b) * (1.0 / 4294967296.0);          // [0, 1)
    double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    out[i] = float(mean + std * z);
  }
}

}  // namespace odyssey
