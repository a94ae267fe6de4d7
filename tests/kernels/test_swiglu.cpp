// swiglu_forward against a double reference; swiglu_backward against central differences of the
// double reference's L = sum(out * R) over every element of gate_up (it overwrites, not accumulates).
// Inputs span [-12, 12] so sigmoid's tails are exercised. Tolerances: forward 1e-6 + 1e-6 |ref|;
// backward 1e-5 + 1e-5 |ref|.
#include "odyssey/kernels/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace swiglu_test {

constexpr int N = 37, F = 23;

std::vector<double> swiglu_reference(const std::vector<double>& gu) {
  std::vector<double> out(size_t(N) * F);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double a = gu[size_t(n) * 2 * F + size_t(f)], u = gu[size_t(n) * 2 * F + size_t(F + f)];
      out[size_t(n) * F + size_t(f)] = a / (1.0 + std::exp(-a)) * u;
    }
  return out;
}

TEST(SwiGLU, ForwardMatchesReference) {
  auto gu = random_floats(size_t(N) * 2 * F, 1, -12.0f, 12.0f);
  std::vector<float> out(size_t(N) * F);
  swiglu_forward(out.data(), gu.data(), N, F);
  expect_close(out, swiglu_reference(to_double(gu)), 1e-6, 1e-6, "out");
}

TEST(SwiGLU, BackwardMatchesFiniteDifferences) {
  auto gu = random_floats(size_t(N) * 2 * F, 2, -12.0f, 12.0f), R = random_floats(size_t(N) * F, 3);
  std::vector<float> dgu = random_floats(gu.size(), 4);  // garbage: backward overwrites it
  swiglu_backward(dgu.data(), R.data(), gu.data(), N, F);
  auto gd = to_double(gu), r = to_double(R);
  auto loss = [&] { return dot(swiglu_reference(gd), r); };
  for (size_t i = 0; i < gd.size(); ++i) {
    const double expected = central_difference(gd, i, 1e-5, loss);
    EXPECT_NEAR(dgu[i], expected, 1e-5 + 1e-5 * std::abs(expected)) << "dgate_up[" << i << "]";
  }
}

}  // namespace swiglu_test
