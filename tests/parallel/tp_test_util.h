// Shared by the tensor-parallel tests: slicing a global row-major matrix the way a rank holds its
// shard, and the relative error of a shard against the single-process result.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace odyssey::tp_test {

using Vec = std::vector<float>;

// Largest |got - want| over the largest |want|.
inline double rel_error(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return err / std::max(scale, 1e-30);
}

// Rows [r0, r0 + n) of a [*, cols] matrix.
inline Vec rows_of(const Vec& m, int64_t r0, int64_t n, int64_t cols) {
  return Vec(m.begin() + r0 * cols, m.begin() + (r0 + n) * cols);
}

// Columns [c0, c0 + w) of a [rows, cols] matrix.
inline Vec cols_of(const Vec& m, int64_t rows, int64_t cols, int64_t c0, int64_t w) {
  Vec out(size_t(rows * w));
  for (int64_t i = 0; i < rows; ++i) std::copy_n(m.begin() + i * cols + c0, w, out.begin() + i * w);
  return out;
}

}  // namespace odyssey::tp_test
