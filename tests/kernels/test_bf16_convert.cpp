// Every compiled path of the bf16 conversion (bf16_convert.h) against core/bf16.h's scalar definition:
// RNE/FTZ bitwise over all 2^32 inputs (NaN as "a NaN with the quiet bit", spec §9; the paths written
// here produce the same payload too), widening over all 2^16, stochastic rounding bitwise on arrays
// with ragged starts and lengths (its randoms come from Philox lanes, the scalar one from philox4x32).
// A path this CPU cannot run is skipped, saying so.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "odyssey/core/bf16.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/cpu_info.h"

namespace odyssey {
namespace {

std::vector<std::string> compiled_path_names() {
  std::vector<std::string> names;
  for (const Bf16ConvertPathSupport& p : bf16_convert_paths()) names.push_back(p.path->name);
  return names;
}

class Bf16ConvertPathTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const Bf16ConvertPathSupport& p : bf16_convert_paths()) {
      if (p.path->name != GetParam()) continue;
      if (!p.runs_here)
        GTEST_SKIP() << "path " << GetParam() << ": this CPU (" << cpu_info().model << ") lacks its ISA";
      path = p.path;
    }
    ASSERT_NE(path, nullptr);
  }
  const Bf16ConvertPath* path = nullptr;
};

bool same_conversion(uint16_t got, uint16_t want) {
  const bool want_nan = (want & 0x7F80u) == 0x7F80u && (want & 0x7Fu) != 0;
  if (want_nan) return (got & 0x7F80u) == 0x7F80u && (got & 0x0040u) != 0;
  return got == want;
}

TEST_P(Bf16ConvertPathTest, NearestEqualsScalarForAllInputs) {
  int64_t mismatches = 0, payload_differs = 0;
  uint32_t first_mismatch = 0;
  // Blocks of 2^16 consecutive patterns at every length alignment the paths have (the block starts at
  // an odd offset into the buffer, so the 32- and 16-wide loops and the scalar tail all see inputs).
#pragma omp parallel reduction(+ : mismatches, payload_differs)
  {
    std::vector<float> x((1 << 16) + 1);
    std::vector<bf16> y((1 << 16) + 1);
#pragma omp for schedule(static)
    for (int64_t hi = 0; hi < (int64_t{1} << 16); ++hi) {
      const size_t skew = size_t(hi % 2);
      for (uint32_t lo = 0; lo < (1u << 16); ++lo)
        x[skew + lo] = std::bit_cast<float>(uint32_t(hi) << 16 | lo);
      path->nearest(x.data() + skew, y.data() + skew, 1 << 16);
      for (uint32_t lo = 0; lo < (1u << 16); ++lo) {
        const uint32_t f = uint32_t(hi) << 16 | lo;
        const uint16_t want = bf16_bits_nearest(f), got = y[skew + lo].bits;
        payload_differs += got != want;
        if (!same_conversion(got, want)) {
#pragma omp critical
          if (mismatches == 0) first_mismatch = f;
          ++mismatches;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "first: 0x" << std::hex << first_mismatch;
  if (payload_differs)
    std::printf("path %s: %lld NaN payloads differ\n", path->name, (long long)payload_differs);
}

TEST_P(Bf16ConvertPathTest, WidenEqualsScalarForAllInputs) {
  std::vector<bf16> x((1 << 16) + 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = {static_cast<uint16_t>(i * 40503u)};
  std::vector<float> y(x.size());
  for (size_t start : {0, 1, 3}) {
    path->widen(x.data() + start, y.data() + start, x.size() - start);
    for (size_t i = start; i < x.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(bf16_to_float(x[i]))) << i;
  }
}

// Inputs of every kind (normals of all binades, denormals, Inf, NaN, exact bf16 values), converted at
// ragged offsets and lengths: each output is the scalar SR of its element's index.
TEST_P(Bf16ConvertPathTest, StochasticEqualsScalar) {
  std::mt19937 gen(17);
  std::vector<float> x(20000);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t f = gen();
    if (i % 7 == 0) f &= 0xFFFF0000u;   // exact
    if (i % 11 == 0) f &= 0x807FFFFFu;  // denormal
    if (i % 13 == 0) f |= 0x7F800000u;  // Inf or NaN
    x[i] = std::bit_cast<float>(f);
  }
  std::vector<bf16> y(x.size());
  const Bf16RoundingKey key{.seed = 0x1234567890ull, .step = 77, .purpose = 2, .tensor = 9, .offset = 0};
  for (auto [start, count, offset] : {std::tuple<size_t, size_t, uint64_t>{0, 20000, 0},
                                      {5, 1000, 123},
                                      {100, 17, 1},
                                      {3, 12345, 1000001},
                                      {0, 128, 128},
                                      {1, 200, (uint64_t{1} << 35) - 300}}) {
    Bf16RoundingKey k = key;
    k.offset = offset;
    path->stochastic(x.data() + start, y.data() + start, count, k);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(y[start + i], to_bf16_stochastic(x[start + i], k, i))
          << "start " << start << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16ConvertPathTest, testing::ValuesIn(compiled_path_names()),
                         [](const testing::TestParamInfo<std::string>& info) { return info.param; });

// The bulk functions split large calls over threads: the bits do not depend on the split or thread count.
TEST(Bf16Convert, BulkEqualsScalarAtAnyThreadCount) {
  const size_t n = (size_t{1} << 18) + 77;
  std::vector<float> x(n);
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(gen);
  const Bf16RoundingKey key{.seed = 8, .step = 1, .purpose = 1, .tensor = 4, .offset = 999};
  std::vector<bf16> nearest(n), stochastic(n);
  std::vector<float> widened(n);
  const int threads = omp_get_max_threads();
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    convert_to_bf16(x.data(), nearest.data(), n);
    convert_to_bf16_stochastic(x.data(), stochastic.data(), n, key);
    convert_to_float(nearest.data(), widened.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(nearest[i], to_bf16(x[i]));
      ASSERT_EQ(stochastic[i], to_bf16_stochastic(x[i], key, i));
      ASSERT_EQ(widened[i], bf16_to_float(nearest[i]));
    }
  }
  omp_set_num_threads(threads);
  std::printf("bf16 conversion path in use: %s\n", bf16_convert_path().name);
}

}  // namespace
}  // namespace odyssey
