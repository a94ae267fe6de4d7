// fill_zero and FloatBuffer::zero: exactly the range zeroed, on the threaded path (more than two 64 KiB
// blocks, a partial last block) and the single-thread one, nothing past it touched.
#include "odyssey/core/buffer.h"

#include <gtest/gtest.h>

#include <vector>

using namespace odyssey;

namespace {

std::vector<float> ramp(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 1.0f + float(i % 1000);
  return x;
}

TEST(Buffer, FillZeroExactlyTheRange) {
  for (size_t n : {size_t{0}, size_t{1000}, size_t{(1 << 14) * 5 + 37}, size_t{300007}}) {
    auto x = ramp(n + 16);
    fill_zero(x.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], 0.0f) << n << ": " << i;
    for (size_t i = n; i < x.size(); ++i) ASSERT_EQ(x[i], 1.0f + float(i % 1000)) << n << ": " << i;
  }
}

TEST(Buffer, ZeroClearsEveryElement) {
  FloatBuffer b(300007);
  for (size_t i = 0; i < b.size(); ++i) b.data()[i] = float(i);
  b.zero();
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b.data()[i], 0.0f) << i;
}

}  // namespace
