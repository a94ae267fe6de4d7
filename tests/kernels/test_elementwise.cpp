// Residual add and gradient accumulation: exact in float, so compared bitwise, at a size small
// enough to run single-threaded and one large enough to take the threaded path.
#include "odyssey/kernels/elementwise.h"

#include <gtest/gtest.h>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

TEST(Elementwise, AddAndAccumulate) {
  for (size_t n : {size_t{37 * 3 * 40}, size_t{300007}}) {
    auto a = random_floats(n, 1), b = random_floats(n, 2);
    std::vector<float> out(n, 7.0f);
    add_forward(out.data(), a.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
    auto dst = a;
    accumulate(dst.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], a[i] + b[i]) << i;
  }
}

// out may alias an input (in-place residual).
TEST(Elementwise, AddInPlace) {
  auto a = random_floats(1000, 3), b = random_floats(1000, 4);
  auto expected = a;
  for (size_t i = 0; i < a.size(); ++i) expected[i] += b[i];
  add_forward(a.data(), a.data(), b.data(), a.size());
  EXPECT_EQ(a, expected);
}

}  // namespace
