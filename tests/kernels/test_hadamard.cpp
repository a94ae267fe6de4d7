// H32: against the matrix definition H[i][j] = (-1)^popcount(i & j) in double, bitwise against the
// plain scalar butterfly the spec describes, and the identity H·H = 32·I.
#include "odyssey/kernels/hadamard.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "odyssey/core/error.h"
#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

int h32(int i, int j) {
  return std::popcount(unsigned(i & j)) % 2 ? -1 : 1;
}

// The scalar butterflies, strides 1, 2, 4, 8, 16, pairs (a + b, a - b): the spec's definition.
void butterfly_reference(float* x) {
  for (int h = 1; h < 32; h *= 2)
    for (int i = 0; i < 32; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

TEST(Hadamard, BasisVectorsGiveTheMatrixColumns) {
  for (int k = 0; k < 32; ++k) {
    std::vector<float> x(32, 0.0f);
    x[k] = 1.0f;
    hadamard32(x.data(), 32);
    for (int i = 0; i < 32; ++i) ASSERT_EQ(x[i], float(h32(i, k))) << "row " << i << " column " << k;
  }
}

TEST(Hadamard, MatchesNaiveMatrixProduct) {
  const size_t n = 32 * 37;
  auto x = random_floats(n, 11, -3.0f, 3.0f);
  auto y = x;
  hadamard32(y.data(), n);
  for (size_t b = 0; b < n; b += 32) {
    for (int i = 0; i < 32; ++i) {
      double exact = 0.0, magnitude = 0.0;
      for (int j = 0; j < 32; ++j) {
        exact += h32(i, j) * double(x[b + j]);
        magnitude += std::fabs(double(x[b + j]));
      }
      // 5 rounded additions per output: |error| <= 5 eps sum |x| (loose bound).
      ASSERT_NEAR(y[b + i], exact, 5 * 6e-8 * magnitude) << "block " << b / 32 << " row " << i;
    }
  }
}

TEST(Hadamard, BitwiseEqualToScalarButterflies) {
  for (size_t n : {size_t{32}, size_t{32 * 5}, size_t{32 * 4099}}) {  // the last takes the threaded path
    auto x = random_floats(n, 12, -100.0f, 100.0f);
    auto expected = x;
    for (size_t b = 0; b < n; b += 32) butterfly_reference(expected.data() + b);
    hadamard32(x.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], expected[i]) << "n " << n << " element " << i;
  }
}

TEST(Hadamard, TwiceGives32x) {
  const size_t n = 32 * 1000;
  auto x = random_floats(n, 13, -1.0f, 1.0f);
  x[7] = 1e4f;  // an outlier: the error bound scales with the block's magnitude
  auto y = x;
  hadamard32(y.data(), n);
  hadamard32(y.data(), n);
  for (size_t b = 0; b < n; b += 32) {
    double magnitude = 0.0;
    for (int j = 0; j < 32; ++j) magnitude += std::fabs(x[b + j]);
    for (int i = 0; i < 32; ++i)
      ASSERT_NEAR(y[b + i], 32.0 * x[b + i], 10 * 6e-8 * 32 * magnitude) << "element " << b + i;
  }
  // Powers of two and small integers stay exact.
  std::vector<float> ints(32);
  for (int i = 0; i < 32; ++i) ints[i] = float(i - 16);
  auto twice = ints;
  hadamard32(twice.data(), 32);
  hadamard32(twice.data(), 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(twice[i], 32.0f * ints[i]);
}

TEST(Hadamard, LengthMustBeAMultipleOf32) {
  std::vector<float> x(33, 1.0f);
  EXPECT_THROW(hadamard32(x.data(), 33), Error);
  EXPECT_NO_THROW(hadamard32(x.data(), 0));
}

}  // namespace
