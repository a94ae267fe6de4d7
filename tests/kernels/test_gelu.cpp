// GELU (tanh form) against a double reference using std::tanh; the backward against central
// differences of the double reference. Tolerances: forward 2e-6 + 2e-6 |ref| (our vectorized tanh is
// good to ~1e-7 absolute, scaled by |x| / 2); backward 1e-5 + 1e-5 |ref|.
#include "odyssey/kernels/gelu.h"

#include <gtest/gtest.h>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

double gelu_reference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardMatchesReference) {
  auto x = random_floats(37 * 3 * 40, 1, -6.0f, 6.0f);
  std::vector<float> out(x.size());
  gelu_forward(out.data(), x.data(), x.size());
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = gelu_reference(x[i]);
  expect_close(out, ref, 2e-6, 2e-6, "gelu");
}

// Saturation: large |x| gives x or 0 exactly enough, and never inf/nan (x^3 overflows at 1e13).
TEST(Gelu, ForwardSaturates) {
  std::vector<float> x{-1e20f, -1e13f, -1e4f, -30.0f, -10.0f, 0.0f, 10.0f, 30.0f, 1e4f, 1e13f, 1e20f};
  std::vector<float> out(x.size());
  gelu_forward(out.data(), x.data(), x.size());
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = x[i] > 0 ? x[i] : 0.0;  // exact limit; |diff| < 1e-20 here
  expect_close(out, ref, 1e-6, 1e-6, "gelu saturated");
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndOverwrites) {
  const size_t n = 37 * 3 * 40;
  auto x = random_floats(n, 2, -6.0f, 6.0f), R = random_floats(n, 3);
  auto dx = random_floats(n, 4);  // stale values: the backward must overwrite them, not add to them
  gelu_backward(dx.data(), x.data(), R.data(), n);
  // L = sum(gelu(x) * R); only term i depends on x[i], so its central difference is that term's.
  const double h = 1e-4;
  for (size_t i = 0; i < n; ++i) {
    const double fd = (gelu_reference(x[i] + h) - gelu_reference(x[i] - h)) / (2 * h) * R[i];
    const double expected = fd;
    EXPECT_NEAR(dx[i], expected, 1e-5 + 1e-5 * std::abs(expected)) << "x=" << x[i];
  }
}

// Large arrays take the threaded path; results do not depend on it.
TEST(Gelu, LargeArrayMatchesSmallChunks) {
  const size_t n = 100003;
  auto x = random_floats(n, 5, -6.0f, 6.0f);
  std::vector<float> whole(n), pieces(n);
  gelu_forward(whole.data(), x.data(), n);
  for (size_t i = 0; i < n; i += 1000)
    gelu_forward(pieces.data() + i, x.data() + i, std::min<size_t>(1000, n - i));
  EXPECT_EQ(whole, pieces);
}

}  // namespace
