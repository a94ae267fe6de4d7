// linear_forward against a double reference; linear_backward against central differences of the
// double reference's loss L = sum(out * R), with gradients pre-filled to check they accumulate.
// Tolerances: forward |err| <= 1e-5 + 1e-5 |ref| (float dot products of length C = 40);
// backward |err| <= 2e-5 + 1e-5 |ref| (float sums over OC = 67 or N = 111 terms plus the base).
#include "odyssey/kernels/linear.h"

#include <gtest/gtest.h>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace linear_test {

constexpr int N = 37 * 3, C = 40, OC = 67;

std::vector<double> linear_reference(const std::vector<double>& inp, const std::vector<double>& w,
                                     const std::vector<double>* bias) {
  std::vector<double> out(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = bias ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; ++c) s += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

TEST(Linear, ForwardMatchesReference) {
  auto inp = random_floats(N * C, 1), w = random_floats(OC * C, 2), b = random_floats(OC, 3);
  for (bool with_bias : {true, false}) {
    std::vector<float> out(N * OC, 99.0f);  // overwritten, not accumulated
    linear_forward(out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
    auto bd = to_double(b);
    expect_close(out, linear_reference(to_double(inp), to_double(w), with_bias ? &bd : nullptr), 1e-5, 1e-5,
                 "out");
  }
}

// dinp is overwritten (it starts as garbage here); the weight and bias gradients accumulate.
TEST(Linear, BackwardMatchesFiniteDifferencesOverwritesDinpAccumulatesWeights) {
  auto inp = random_floats(N * C, 4), w = random_floats(OC * C, 5), b = random_floats(OC, 6);
  auto R = random_floats(N * OC, 7);  // dL/dout
  auto dinp = random_floats(N * C, 8), dw = random_floats(OC * C, 9), db = random_floats(OC, 10);
  const auto dinp0 = dinp, dw0 = dw, db0 = db;
  linear_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);

  auto xi = to_double(inp), xw = to_double(w), xb = to_double(b), r = to_double(R);
  auto loss = [&] { return dot(linear_reference(xi, xw, &xb), r); };
  const double h = 1e-3;  // L is linear in every input, so h only has to keep rounding small
  auto check = [&](std::vector<double>& x, const std::vector<float>& grad, const std::vector<float>& base,
                   const char* name) {
    for (size_t i : sample_indices(x.size(), 150, 11)) {
      const double expected = base[i] + central_difference(x, i, h, loss);
      EXPECT_NEAR(grad[i], expected, 2e-5 + 1e-5 * std::abs(expected)) << name << "[" << i << "]";
    }
  };
  check(xi, dinp, std::vector<float>(dinp0.size(), 0.0f), "dinp");
  check(xw, dw, dw0, "dweight");
  check(xb, db, db0, "dbias");
}

// dinp and dbias may be null; dweight is still accumulated.
TEST(Linear, BackwardWithoutOptionalGradients) {
  auto inp = random_floats(N * C, 12), w = random_floats(OC * C, 13), R = random_floats(N * OC, 14);
  std::vector<float> dw_full(OC * C, 0.5f), dw_partial(OC * C, 0.5f), dinp(N * C, 0.0f), db(OC, 0.0f);
  linear_backward(dinp.data(), dw_full.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);
  linear_backward(nullptr, dw_partial.data(), nullptr, R.data(), inp.data(), w.data(), N, C, OC);
  EXPECT_EQ(dw_full, dw_partial);
}

}  // namespace linear_test
