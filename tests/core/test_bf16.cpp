// The scalar definition of the bf16 roundings (core/bf16.h) against an independent one: RNE as "the
// nearer of the two bf16 neighbours, ties to the even one, measured in double", over all 2^32 inputs;
// the special cases by value; stochastic rounding's neighbours, determinism and unbiasedness.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "odyssey/core/bf16.h"
#include "odyssey/core/error.h"

using namespace odyssey;

namespace {

uint16_t nearest_of(uint32_t f) {
  return bf16_bits_nearest(f);
}

// The value of bf16 pattern h (sign-magnitude), with the pattern above the largest finite value read as
// 2^128: RNE in IEEE terms rounds to Inf exactly when it rounds to that.
double bf16_value(uint32_t h) {
  const double magnitude =
      (h & 0x7FFFu) == 0x7F80u ? std::ldexp(1.0, 128) : double(std::bit_cast<float>((h & 0x7FFFu) << 16));
  return h & 0x8000u ? -magnitude : magnitude;
}

// Independent RNE for a finite normal fp32 pattern f: the two neighbours by truncation and its successor.
uint16_t nearest_by_distance(uint32_t f) {
  const double x = double(std::bit_cast<float>(f));
  const uint32_t lo = f >> 16, hi = lo + 1;
  const double dlo = std::fabs(x - bf16_value(lo)), dhi = std::fabs(bf16_value(hi) - x);
  if (dlo != dhi) return static_cast<uint16_t>(dlo < dhi ? lo : hi);
  return static_cast<uint16_t>(lo % 2 == 0 ? lo : hi);
}

}  // namespace

TEST(Bf16, NearestSpecialValues) {
  EXPECT_EQ(nearest_of(0x3F800000u), 0x3F80u);  // 1.0
  EXPECT_EQ(nearest_of(0x3F808000u), 0x3F80u);  // tie, even below
  EXPECT_EQ(nearest_of(0x3F818000u), 0x3F82u);  // tie, even above
  EXPECT_EQ(nearest_of(0x3F808001u), 0x3F81u);  // just above the tie
  EXPECT_EQ(nearest_of(0x3F807FFFu), 0x3F80u);  // just below the tie
  EXPECT_EQ(nearest_of(0xBF818000u), 0xBF82u);  // negative tie: magnitude to even
  EXPECT_EQ(nearest_of(0x3FFFFFFFu), 0x4000u);  // carry into the exponent
  EXPECT_EQ(nearest_of(0x7F7FFFFFu), 0x7F80u);  // largest float: beyond the largest bf16 + half ulp -> Inf
  EXPECT_EQ(nearest_of(0x7F7F7FFFu), 0x7F7Fu);  // stays the largest finite bf16
  EXPECT_EQ(nearest_of(0xFF7FFFFFu), 0xFF80u);
  EXPECT_EQ(nearest_of(0x7F800000u), 0x7F80u);  // +Inf
  EXPECT_EQ(nearest_of(0xFF800000u), 0xFF80u);  // -Inf
  EXPECT_EQ(nearest_of(0x7F800001u), 0x7FC0u);  // signalling NaN: quiet, payload truncated
  EXPECT_EQ(nearest_of(0x7FC00000u), 0x7FC0u);
  EXPECT_EQ(nearest_of(0xFFFFFFFFu), 0xFFFFu);
  EXPECT_EQ(nearest_of(0x7F810000u), 0x7FC1u);  // payload bits above the cut are kept
  EXPECT_EQ(nearest_of(0x00000000u), 0x0000u);
  EXPECT_EQ(nearest_of(0x80000000u), 0x8000u);
  EXPECT_EQ(nearest_of(0x00000001u), 0x0000u);  // denormals flush, sign kept
  EXPECT_EQ(nearest_of(0x807FFFFFu), 0x8000u);
  EXPECT_EQ(nearest_of(0x00800000u), 0x0080u);  // smallest normal stays
  EXPECT_EQ(nearest_of(0x0080FFFFu), 0x0081u);
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80u);
  EXPECT_EQ(bf16_to_float({0xC049u}), -3.140625f);
  EXPECT_EQ(round_to_bf16(3.14159265f), 3.140625f);
}

// Every finite normal fp32: the nearest by distance. Every other pattern: Inf, quiet NaN or signed zero.
// All 2^32 inputs in double take a minute on 2 cores; this checks every pattern of the binades that hold
// the edge cases (exponent fields 0, 1, 126, 127, 254, 255, both signs: the smallest normals, ties
// around 1, the overflow to Inf, NaN) and every 97th pattern elsewhere. The vectorized paths are
// checked against bf16_bits_nearest on all 2^32 (test_bf16_convert).
TEST(Bf16, NearestEqualsNearestByDistance) {
  int64_t mismatches = 0, checked = 0;
#pragma omp parallel for schedule(static) reduction(+ : mismatches, checked)
  for (int64_t hi = 0; hi < (int64_t{1} << 16); ++hi) {
    const uint32_t field = (uint32_t(hi) >> 7) & 0xFFu;
    const bool whole = field <= 1 || field == 126 || field == 127 || field >= 254;
    for (uint32_t lo = whole ? 0 : uint32_t(hi % 97); lo < (1u << 16); lo += whole ? 1 : 97) {
      const uint32_t f = uint32_t(hi) << 16 | lo;
      ++checked;
      const uint32_t exponent = f & 0x7F800000u;
      uint16_t expected;
      if (exponent == 0x7F800000u)
        expected = static_cast<uint16_t>(f & 0x007FFFFFu ? (f >> 16) | 0x40u : f >> 16);
      else if (exponent == 0)
        expected = static_cast<uint16_t>((f >> 16) & 0x8000u);
      else
        expected = nearest_by_distance(f);
      mismatches += bf16_bits_nearest(f) != expected;
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(checked, int64_t{1} << 26);
}

TEST(Bf16, WidenIsExact) {
  for (uint32_t h = 0; h < (1u << 16); ++h) {
    const float x = bf16_to_float({static_cast<uint16_t>(h)});
    EXPECT_EQ(std::bit_cast<uint32_t>(x), h << 16);
    if (!std::isnan(x) && std::fpclassify(x) != FP_SUBNORMAL) {
      ASSERT_EQ(to_bf16(x).bits, h);  // a bf16 value rounds to itself
    }
  }
}

TEST(Bf16, StochasticIsKeyedAndPicksANeighbour) {
  const Bf16RoundingKey key{.seed = 1234, .step = 7, .purpose = 1, .tensor = 3, .offset = 1000};
  Bf16RoundingKey other_step = key;
  other_step.step = 8;
  int differ = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    const float x = std::ldexp(1.0f + float(i) / 4096.0f, int(i % 41) - 20) * (i % 3 == 0 ? -1.0f : 1.0f);
    const uint32_t f = std::bit_cast<uint32_t>(x);
    const bf16 a = to_bf16_stochastic(x, key, i);
    EXPECT_EQ(a, to_bf16_stochastic(x, key, i));  // same key, same bits
    EXPECT_TRUE(a.bits == (f >> 16) || a.bits == (f >> 16) + 1) << i;
    if ((f & 0xFFFFu) == 0) {
      EXPECT_EQ(a.bits, f >> 16);  // exact values stay
    }
    // Element i of a call keyed at offset o is index o + i.
    Bf16RoundingKey shifted = key;
    shifted.offset = 0;
    EXPECT_EQ(a, to_bf16_stochastic(x, shifted, key.offset + i));
    differ += a != to_bf16_stochastic(x, other_step, i);
  }
  EXPECT_GT(differ, 100);  // another step draws other randoms (about 1/3 of inexact cuts differ)
}

TEST(Bf16, StochasticSpecialValuesAsNearest) {
  const Bf16RoundingKey key{.seed = 5};
  for (uint32_t f :
       {0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFC12345u, 0x00000001u, 0x807FFFFFu, 0x0u, 0x80000000u}) {
    for (uint64_t i = 0; i < 64; ++i)
      EXPECT_EQ(to_bf16_stochastic(std::bit_cast<float>(f), key, i).bits, bf16_bits_nearest(f)) << f;
  }
}

// The mean of N = 2^16 draws (indices 0..N-1) of a fixed x against x: each draw is the lower neighbour
// or the upper one (an ulp above) with p = cut / 2^16, so the mean's standard deviation is
// ulp * sqrt(p (1 - p) / N); the test asks for 4 of them (a false failure about once in 16,000 runs
// per value, but the keys are fixed, so the outcome is too). p stays within [0.02, 0.98], where N p
// draws are enough for the normal approximation (at p = 2^-16 one up is expected and five occur).
TEST(Bf16, StochasticIsUnbiased) {
  constexpr int kDraws = 1 << 16;
  for (uint32_t f :
       {0x3F808000u, 0x3F801999u, 0x3F80FAE1u, 0xC2ABCDEFu, 0x3E4C0520u, 0x0080F000u, 0x7F7E4CCCu}) {
    const float x = std::bit_cast<float>(f);
    const Bf16RoundingKey key{.seed = 99, .step = 3, .purpose = 2, .tensor = f};
    double sum = 0;
    for (int i = 0; i < kDraws; ++i) sum += double(bf16_to_float(to_bf16_stochastic(x, key, i)));
    const double mean = sum / kDraws;
    const double ulp = std::fabs(double(bf16_to_float({uint16_t((f >> 16) + 1)})) -
                                 double(bf16_to_float({uint16_t(f >> 16)})));
    const double p = double(f & 0xFFFFu) / 65536.0;
    const double sigma = ulp * std::sqrt(p * (1 - p) / kDraws);
    EXPECT_LE(std::fabs(mean - double(x)), 4 * sigma) << "x = " << x << " p = " << p;
  }
}

TEST(Bf16, StochasticIndexLimit) {
  const Bf16RoundingKey key{.offset = kBf16RoundingIndexLimit - 1};
  EXPECT_NO_THROW(to_bf16_stochastic(1.5f, key, 0));
  EXPECT_THROW(to_bf16_stochastic(1.5f, key, 1), Error);
}
