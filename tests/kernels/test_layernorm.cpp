// layernorm_forward against a double reference (out, mean, rstd); layernorm_backward against central
// differences of the double reference's L = sum(out * R), over every input, with pre-filled gradients.
// Tolerances: forward 1e-5 + 1e-5 |ref|; backward 5e-5 + 1e-5 |ref| (dweight/dbias are float sums
// over N = 111 rows); inputs offset by 1000: 1e-3 (the float inputs themselves are only ~6e-5 apart).
#include "odyssey/kernels/layernorm.h"

#include <gtest/gtest.h>

#include <omp.h>
#include <algorithm>
#include <vector>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace layernorm_test {

constexpr int N = 37 * 3, C = 40;
constexpr double kEps = 1e-5;

struct RefOut {
  std::vector<double> out, mean, rstd;
};

RefOut layernorm_reference(const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& b, int n_rows = N) {
  RefOut r{std::vector<double>(x.size()), std::vector<double>(n_rows), std::vector<double>(n_rows)};
  for (int n = 0; n < n_rows; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    const double s = 1.0 / std::sqrt(v / C + kEps);
    for (int c = 0; c < C; ++c) r.out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    r.mean[n] = m;
    r.rstd[n] = s;
  }
  return r;
}

TEST(LayerNorm, ForwardMatchesReference) {
  auto x = random_floats(N * C, 1, -2.0f, 3.0f), w = random_floats(C, 2), b = random_floats(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  auto ref = layernorm_reference(to_double(x), to_double(w), to_double(b));
  expect_close(out, ref.out, 1e-5, 1e-5, "out");
  expect_close(mean, ref.mean, 1e-5, 1e-5, "mean");
  expect_close(rstd, ref.rstd, 1e-5, 1e-5, "rstd");
}

// A large common offset: a one-pass E[x^2] - E[x]^2 variance would lose every digit here.
TEST(LayerNorm, ForwardIsStableUnderLargeMean) {
  auto x = random_floats(N * C, 4);
  for (auto& v : x) v += 1000.0f;
  auto w = random_floats(C, 5), b = random_floats(C, 6);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  auto ref = layernorm_reference(to_double(x), to_double(w), to_double(b));
  expect_close(out, ref.out, 1e-3, 0.0, "out");
  expect_close(rstd, ref.rstd, 0.0, 1e-3, "rstd");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto x = random_floats(N * C, 7, -2.0f, 3.0f), w = random_floats(C, 8), b = random_floats(C, 9);
  auto R = random_floats(N * C, 10);
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  auto dx = random_floats(N * C, 11), dw = random_floats(C, 12), db = random_floats(C, 13);
  const auto dx0 = dx, dw0 = dw, db0 = db;
  layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                     N, C);

  auto xd = to_double(x), wd = to_double(w), bd = to_double(b), r = to_double(R);
  auto loss = [&] { return dot(layernorm_reference(xd, wd, bd).out, r); };
  const double h = 1e-4;  // truncation ~h^2 = 1e-8; rounding ~1e-16 |L| / h, both far below the tolerance
  auto check = [&](std::vector<double>& v, const std::vector<float>& grad, const std::vector<float>& base,
                   const char* name) {
    for (size_t i = 0; i < v.size(); ++i) {
      const double expected = base[i] + central_difference(v, i, h, loss);
      EXPECT_NEAR(grad[i], expected, 5e-5 + 1e-5 * std::abs(expected)) << name << "[" << i << "]";
    }
  };
  check(xd, dx, dx0, "dinp");
  check(wd, dw, dw0, "dweight");
  check(bd, db, db0, "dbias");
}

// dweight/dbias are reduced in a fixed order: bitwise identical for any thread count.
TEST(LayerNorm, BackwardIsDeterministicAcrossThreadCounts) {
  constexpr int rows = 1000;  // several row blocks
  auto x = random_floats(rows * C, 14), w = random_floats(C, 15), b = random_floats(C, 16);
  auto R = random_floats(rows * C, 17);
  std::vector<float> out(rows * C), mean(rows), rstd(rows);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dx(rows * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                       rstd.data(), rows, C);
    dw.insert(dw.end(), db.begin(), db.end());
    dw.insert(dw.end(), dx.begin(), dx.end());
    results.push_back(dw);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

// Rows given in pieces of any size (the fused LM head's chunks) give bitwise the one call's dinp,
// dweight and dbias; the sums are the documented order: blocks of 32 rows from the first, each summed
// row by row, folded in order.
TEST(LayerNorm, BackwardInPiecesIsBitwiseOneCall) {
  constexpr int rows = 1000;
  auto x = random_floats(rows * C, 24), w = random_floats(C, 25), b = random_floats(C, 26);
  auto dy = random_floats(rows * C, 27);
  std::vector<float> out(rows * C), mean(rows), rstd(rows);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C);
  std::vector<float> dx(rows * C, 0.0f), dw(C, 0.5f), db(C, -0.5f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                     rows, C);
  std::vector<float> fold_w(C, 0.0f), fold_b(C, 0.0f);
  for (int r0 = 0; r0 < rows; r0 += 32) {
    std::vector<float> pw(C, 0.0f), pb(C, 0.0f);
    for (int r = r0; r < std::min(rows, r0 + 32); ++r)
      for (int c = 0; c < C; ++c) {
        const float dyc = dy[size_t(r) * C + c];
        pw[size_t(c)] += dyc * ((x[size_t(r) * C + c] - mean[size_t(r)]) * rstd[size_t(r)]);
        pb[size_t(c)] += dyc;
      }
    for (int c = 0; c < C; ++c) fold_w[size_t(c)] += pw[size_t(c)], fold_b[size_t(c)] += pb[size_t(c)];
  }
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dw[size_t(c)], 0.5f + fold_w[size_t(c)]) << c;
    EXPECT_EQ(db[size_t(c)], -0.5f + fold_b[size_t(c)]) << c;
  }
  for (const std::vector<int>& pieces : std::vector<std::vector<int>>{
           {1000}, {1, 31, 32, 33, 500, 403}, {64, 936}, {17, 17, 17, 949}, {999, 1}}) {
    std::vector<float> px(rows * C, 0.0f), pw(C, 0.5f), pb(C, -0.5f);
    NormGradSums sums(2 * C);
    int r0 = 0;
    for (int n : pieces) {
      const size_t o = size_t(r0) * C;
      layernorm_backward_rows(px.data() + o, sums, dy.data() + o, x.data() + o, w.data(), mean.data() + r0,
                              rstd.data() + r0, n, C);
      r0 += n;
    }
    ASSERT_EQ(r0, rows);
    sums.finish(pw.data(), pb.data());
    EXPECT_EQ(px, dx) << pieces.size() << " pieces";
    EXPECT_EQ(pw, dw) << pieces.size() << " pieces";
    EXPECT_EQ(pb, db) << pieces.size() << " pieces";
  }
}

}  // namespace layernorm_test
