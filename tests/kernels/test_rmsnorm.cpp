// rmsnorm_forward against a double reference (out, rstd); rmsnorm_backward against central differences
// of the double reference's L = sum(out * R), over every input and weight, accumulating into
// pre-filled gradients; dweight bitwise the same for any thread count.
// Tolerances: forward 1e-5 + 1e-5 |ref|; backward 5e-5 + 1e-5 |ref| (dweight is a float sum over
// N = 111 rows).
#include "odyssey/kernels/rmsnorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace rmsnorm_test {

constexpr int N = 37 * 3, C = 40;
constexpr float kEps = 1e-5f;

struct RefOut {
  std::vector<double> out, rstd;
};

RefOut rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& w, int rows = N) {
  RefOut r{std::vector<double>(x.size()), std::vector<double>(size_t(rows))};
  for (int n = 0; n < rows; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[size_t(n * C + c)] * x[size_t(n * C + c)];
    const double s = 1.0 / std::sqrt(ss / C + double(kEps));
    for (int c = 0; c < C; ++c) r.out[size_t(n * C + c)] = w[size_t(c)] * (x[size_t(n * C + c)] * s);
    r.rstd[size_t(n)] = s;
  }
  return r;
}

TEST(RMSNorm, ForwardMatchesReference) {
  auto x = random_floats(N * C, 1, -2.0f, 3.0f), w = random_floats(C, 2);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  auto ref = rmsnorm_reference(to_double(x), to_double(w));
  expect_close(out, ref.out, 1e-5, 1e-5, "out");
  expect_close(rstd, ref.rstd, 1e-5, 1e-5, "rstd");
}

// A row of zeros: rstd = 1/sqrt(eps), the output zero, no NaN.
TEST(RMSNorm, ZeroRowIsFinite) {
  std::vector<float> x(C, 0.0f), w = random_floats(C, 3), out(C), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, C, kEps);
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(double(kEps)), 1e-2);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(RMSNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto x = random_floats(N * C, 7, -2.0f, 3.0f), w = random_floats(C, 8), R = random_floats(N * C, 10);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  auto dx = random_floats(N * C, 11), dw = random_floats(C, 12);
  const auto dx0 = dx, dw0 = dw;
  rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);

  auto xd = to_double(x), wd = to_double(w), r = to_double(R);
  auto loss = [&] { return dot(rmsnorm_reference(xd, wd).out, r); };
  const double h = 1e-4;
  auto check = [&](std::vector<double>& v, const std::vector<float>& grad, const std::vector<float>& base,
                   const char* name) {
    for (size_t i = 0; i < v.size(); ++i) {
      const double expected = base[i] + central_difference(v, i, h, loss);
      EXPECT_NEAR(grad[i], expected, 5e-5 + 1e-5 * std::abs(expected)) << name << "[" << i << "]";
    }
  };
  check(xd, dx, dx0, "dinp");
  check(wd, dw, dw0, "dweight");
}

TEST(RMSNorm, BackwardIsDeterministicAcrossThreadCounts) {
  constexpr int rows = 1000;  // several row blocks
  auto x = random_floats(rows * C, 14), w = random_floats(C, 15), R = random_floats(rows * C, 17);
  std::vector<float> out(rows * C), rstd(rows);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, C, kEps);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dx(rows * C, 0.0f), dw(C, 0.0f);
    rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), rows, C);
    dw.insert(dw.end(), dx.begin(), dx.end());
    results.push_back(dw);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

// Rows given in pieces of any size (the fused LM head's chunks) give bitwise the one call's dinp and
// dweight.
TEST(RMSNorm, BackwardInPiecesIsBitwiseOneCall) {
  constexpr int rows = 1000;
  auto x = random_floats(rows * C, 31), w = random_floats(C, 32), dy = random_floats(rows * C, 33);
  std::vector<float> out(rows * C), rstd(rows);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, C, kEps);
  std::vector<float> dx(rows * C, 0.0f), dw(C, 0.25f);
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), rows, C);
  for (const std::vector<int>& pieces :
       std::vector<std::vector<int>>{{1, 31, 32, 33, 500, 403}, {64, 936}, {17, 17, 17, 949}, {999, 1}}) {
    std::vector<float> px(rows * C, 0.0f), pw(C, 0.25f);
    NormGradSums sums(C);
    int r0 = 0;
    for (int n : pieces) {
      const size_t o = size_t(r0) * C;
      rmsnorm_backward_rows(px.data() + o, sums, dy.data() + o, x.data() + o, w.data(), rstd.data() + r0, n,
                            C);
      r0 += n;
    }
    sums.finish(pw.data());
    EXPECT_EQ(px, dx) << pieces.size() << " pieces";
    EXPECT_EQ(pw, dw) << pieces.size() << " pieces";
  }
}

}  // namespace rmsnorm_test
