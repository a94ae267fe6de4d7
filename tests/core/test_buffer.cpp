// fill_zero and FloatBuffer::zero: exactly the range zeroed, on the threaded path (more than two 64 KiB
// blocks, a partial last block) and the single-thread one, nothing past it touched. Every allocation
// 64-byte aligned and zero, from the heap (calloc, reusing freed blocks), malloc's own mappings and
// the buffer's (64 MiB and more).
#include "odyssey/core/buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
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

TEST(Buffer, EveryAllocationIsAlignedAndZero) {
  // Each size twice: the second allocation may reuse the block the first, written over, left behind.
  for (size_t n : {size_t{1}, size_t{17}, size_t{1000}, size_t{300007}, size_t{3} << 20, size_t{16} << 20,
                   size_t{1} << 24, (size_t{64} << 20) / sizeof(float) + 5})
    for (int round = 0; round < 2; ++round) {
      FloatBuffer b(n);
      // The index of the first element that is not zero (n if none): one assertion per buffer, not
      // one per element (tens of millions of them).
      auto first_nonzero = [&] {
        return size_t(std::find_if(b.data(), b.data() + n, [](float v) { return v != 0.0f; }) - b.data());
      };
      ASSERT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u) << n;
      ASSERT_EQ(first_nonzero(), n) << n;
      std::fill_n(b.data(), n, -1.0f);
      b.resize(n);  // reallocated: zero again
      ASSERT_EQ(first_nonzero(), n) << n << " resized";
      std::fill_n(b.data(), n, -1.0f);
    }
}

}  // namespace
