// Helpers shared by the kernel tests: seeded random data, float<->double copies, central finite
// differences, and a mixed absolute/relative closeness check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

namespace odyssey::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline std::vector<int> random_ints(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

// dL/dx[i] by central differences, L = loss() evaluated with x[i] = x[i] +- h (x restored after).
template <typename Loss>
double central_difference(std::vector<double>& x, size_t i, double h, Loss&& loss) {
  const double saved = x[i];
  x[i] = saved + h;
  const double plus = loss();
  x[i] = saved - h;
  const double minus = loss();
  x[i] = saved;
  return (plus - minus) / (2.0 * h);
}

// Indices at which to take finite differences: all of them when there are at most `count`,
// otherwise the first, the last and random ones in between.
inline std::vector<size_t> sample_indices(size_t size, size_t count, uint32_t seed) {
  std::vector<size_t> idx;
  if (size <= count) {
    for (size_t i = 0; i < size; ++i) idx.push_back(i);
    return idx;
  }
  std::mt19937 gen(seed);
  std::uniform_int_distribution<size_t> dist(1, size - 2);
  idx = {0, size - 1};
  while (idx.size() < count) idx.push_back(dist(gen));
  return idx;
}

// sum(out * r): a scalar loss whose gradient with respect to out is r.
inline double dot(const std::vector<double>& out, const std::vector<double>& r) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
  return s;
}

// |actual - expected| <= atol + rtol * |expected|, reporting the first few failures by index.
inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, double atol,
                         double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i]))) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: got " << actual[i] << ", expected " << expected[i]
                    << " (error " << err << ")";
    }
  }
}

}  // namespace odyssey::test
