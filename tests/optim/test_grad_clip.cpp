// sum_of_squares: against a long-double sum, and the same bits for any thread count (its block
// partials are added in block order) and after a longer call (its block sums' buffer is reused); clip_scale
// as torch.nn.utils.clip_grad_norm_.
#include "odyssey/optim/grad_clip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

using namespace odyssey;

namespace {

std::vector<float> normal_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(gen);
  return x;
}

}  // namespace

TEST(GradClip, SumOfSquaresMatchesLongDouble) {
  // Empty, shorter than the 8 lanes, one block exactly, blocks plus a ragged tail.
  for (size_t n : {size_t(0), size_t(5), size_t(1) << 14, (size_t(3) << 14) + 37}) {
    const auto x = normal_floats(n, uint32_t(n) + 1);
    long double ref = 0;
    for (float v : x) ref += static_cast<long double>(v) * v;
    const double got = sum_of_squares(x.data(), n);
    EXPECT_NEAR(got, double(ref), 1e-13 * double(ref) + 1e-300) << "n=" << n;
  }
}

TEST(GradClip, SumOfSquaresSameBitsForAnyThreadCount) {
  const size_t n = (size_t(37) << 14) + 1001;
  const auto x = normal_floats(n, 7);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_of_squares(x.data(), n);
  for (int t : {2, 3, 5}) {
    omp_set_num_threads(t);
    EXPECT_EQ(sum_of_squares(x.data(), n), one) << t << " threads";
  }
  omp_set_num_threads(threads);
}

TEST(GradClip, SumOfSquaresAfterALongerCall) {
  // The block sums' buffer is reused across calls: a call after a longer one adds its own blocks only.
  const auto small = normal_floats((size_t(2) << 14) + 5, 11), big = normal_floats((size_t(9) << 14) + 3, 12);
  long double ref = 0;
  for (float v : small) ref += static_cast<long double>(v) * v;
  const double first = sum_of_squares(small.data(), small.size());
  EXPECT_NEAR(first, double(ref), 1e-13 * double(ref));
  sum_of_squares(big.data(), big.size());
  EXPECT_EQ(sum_of_squares(small.data(), small.size()), first);
}

TEST(GradClip, ClipScale) {
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(5.0, 0.0f), 1.0f);  // clipping off
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.0f), float(1.0 / (4.0 + 1e-6)));
}
