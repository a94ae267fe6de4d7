#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "odyssey/core/rng.h"

using namespace odyssey;

// Philox4x32-10 known-answer vectors from Random123 (kat_vectors): counter 0, key 0 and all-ones.
TEST(Philox, KnownAnswers) {
  auto zero = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto ones = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
}

// A slice filled from an offset equals the same slice of a whole fill: layout independence.
TEST(Philox, NormalFillIsIndexAddressed) {
  std::vector<float> whole(1000), part(300);
  philox_fill_normal(whole.data(), whole.size(), 0.0f, 1.0f, 42, 7);
  philox_fill_normal(part.data(), part.size(), 0.0f, 1.0f, 42, 7, 333);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(whole[333 + i], part[i]);
}

TEST(Philox, NormalMoments) {
  std::vector<float> x(200000);
  philox_fill_normal(x.data(), x.size(), 0.0f, 0.02f, 1, 2);
  double mean = 0, sq = 0;
  for (float v : x) mean += v, sq += double(v) * v;
  mean /= x.size();
  double std = std::sqrt(sq / x.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 3 * 0.02 / std::sqrt(200000.0) * 2);
  EXPECT_NEAR(std, 0.02, 0.0005);
}
