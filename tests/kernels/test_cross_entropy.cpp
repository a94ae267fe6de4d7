// Fused softmax cross-entropy against a double log-sum-exp reference; the in-place gradient against
// central differences of the double reference's L = dloss * sum_n loss_n. Also the vectorized exp it
// is built on (vec_math.h). Tolerances: losses 2e-6 + 1e-5 |ref|; gradients dloss * (1e-6 + 1e-5 |ref|
// / dloss) i.e. relative to the unscaled softmax; vexp relative 2 FLT_EPSILON in the
// normal range (measured 0.65), vtanh 5e-7 absolute.
#include "odyssey/kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cfloat>

#include "odyssey/core/error.h"
#include "odyssey/kernels/vec_math.h"
#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace cross_entropy_test {

constexpr int N = 37 * 3, V = 67;

// -log softmax(x)[t] for one row, in double.
double row_loss(const double* x, int v_size, int t) {
  if (t < 0) return 0.0;
  double m = x[0];
  for (int v = 1; v < v_size; ++v) m = std::max(m, x[v]);
  double s = 0.0;
  for (int v = 0; v < v_size; ++v) s += std::exp(x[v] - m);
  return std::log(s) + m - x[t];
}

std::vector<int> targets_with_ignored(int n, int v_size, uint32_t seed) {
  auto t = random_ints(n, seed, 0, v_size - 1);
  for (int i = 0; i < n; i += 10) t[i] = -1;  // every tenth row ignored (e.g. padding)
  if (n > 3) t[3] = -100;                     // any negative value means "ignore" (PyTorch uses -100)
  return t;
}

void check_forward(const std::vector<float>& logits, const std::vector<int>& t, int n, int v_size) {
  std::vector<float> losses(n, 99.0f);
  cross_entropy_forward(losses.data(), logits.data(), t.data(), n, v_size);
  auto x = to_double(logits);
  std::vector<double> ref(n);
  for (int i = 0; i < n; ++i) ref[i] = row_loss(x.data() + static_cast<size_t>(i) * v_size, v_size, t[i]);
  expect_close(losses, ref, 2e-6, 1e-5, "loss");
}

TEST(CrossEntropy, ForwardMatchesReference) {
  check_forward(random_floats(N * V, 1, -5.0f, 5.0f), targets_with_ignored(N, V, 2), N, V);
}

// Logits far from zero (both signs) and rows with a huge spread: max subtraction keeps exp in range.
TEST(CrossEntropy, ForwardIsStableForExtremeLogits) {
  auto logits = random_floats(N * V, 3, -5.0f, 5.0f);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) {
      float& x = logits[n * V + v];
      if (n % 3 == 0) x += 1000.0f;
      if (n % 3 == 1) x -= 1000.0f;
      if (n % 3 == 2) x *= 40.0f;  // spread of 400: most probabilities underflow to 0
    }
  check_forward(logits, targets_with_ignored(N, V, 4), N, V);
}

// GPT-2's vocabulary: a row much longer than the vector width and the cache line.
TEST(CrossEntropy, ForwardGpt2Vocabulary) {
  constexpr int n = 5, v = 50257;
  auto t = random_ints(n, 5, 0, v - 1);
  t[2] = v - 1;
  check_forward(random_floats(static_cast<size_t>(n) * v, 6, -10.0f, 10.0f), t, n, v);
}

TEST(CrossEntropy, ForwardBackwardMatchesFiniteDifferences) {
  auto logits = random_floats(N * V, 7, -5.0f, 5.0f);
  for (int v = 0; v < V; ++v) logits[5 * V + v] += 500.0f;  // one row far from zero
  const auto t = targets_with_ignored(N, V, 8);
  const float dloss = 1.0f / 97.0f;  // e.g. 1 / (number of non-ignored tokens)
  std::vector<float> grad = logits, losses(N, 99.0f), forward_losses(N);
  cross_entropy_forward_backward(grad.data(), losses.data(), t.data(), N, V, dloss);
  cross_entropy_forward(forward_losses.data(), logits.data(), t.data(), N, V);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(losses[n], forward_losses[n], 1e-6 + 1e-6 * forward_losses[n]) << n;

  // L = dloss * sum_n loss_n; logit (n, v) enters only row n's loss, so difference that row alone.
  auto x = to_double(logits);
  const double h = 1e-4;
  for (int n = 0; n < N; ++n) {
    double* row = x.data() + static_cast<size_t>(n) * V;
    for (int v = 0; v < V; ++v) {
      const double saved = row[v];
      row[v] = saved + h;
      const double plus = row_loss(row, V, t[n]);
      row[v] = saved - h;
      const double minus = row_loss(row, V, t[n]);
      row[v] = saved;
      const double expected = dloss * (plus - minus) / (2 * h);
      const float got = grad[n * V + v];
      if (t[n] < 0) {
        EXPECT_EQ(got, 0.0f) << "ignored row " << n;
      } else {
        EXPECT_NEAR(got, expected, dloss * 1e-6 + 1e-5 * std::abs(expected)) << "row " << n << " v " << v;
      }
    }
  }
}

// Each gradient row is dloss * (softmax - onehot): it sums to zero.
TEST(CrossEntropy, GradientRowsSumToZeroAtGpt2Vocabulary) {
  constexpr int n = 3, v = 50257;
  auto logits = random_floats(static_cast<size_t>(n) * v, 9, -10.0f, 10.0f);
  std::vector<int> t{7, v - 1, 0};
  std::vector<float> losses(n);
  cross_entropy_forward_backward(logits.data(), losses.data(), t.data(), n, v, 0.5f);
  for (int i = 0; i < n; ++i) {
    double s = 0.0;
    for (int j = 0; j < v; ++j) s += logits[static_cast<size_t>(i) * v + j];
    EXPECT_NEAR(s, 0.0, 1e-5) << i;
    EXPECT_LT(logits[static_cast<size_t>(i) * v + t[i]], 0.0f);
  }
}

// Rows ld > V floats apart (the LM head's padded logits block): each row gives the dense call's bits,
// and the padding after V columns is neither read (NaN there would show) nor written.
TEST(CrossEntropy, StridedRowsGiveTheDenseBits) {
  constexpr int ld = V + 13;
  auto dense = random_floats(size_t(N) * V, 21, -6.0f, 6.0f);
  const auto t = targets_with_ignored(N, V, 22);
  std::vector<float> strided(size_t(N) * ld, std::nanf(""));
  for (int i = 0; i < N; ++i) std::copy_n(dense.begin() + size_t(i) * V, V, strided.begin() + size_t(i) * ld);
  std::vector<float> want(N), got(N), want_fb(N), got_fb(N);
  cross_entropy_forward(want.data(), dense.data(), t.data(), N, V);
  cross_entropy_forward(got.data(), strided.data(), t.data(), N, V, ld);
  EXPECT_EQ(got, want);
  cross_entropy_forward_backward(dense.data(), want_fb.data(), t.data(), N, V, 0.25f);
  cross_entropy_forward_backward(strided.data(), got_fb.data(), t.data(), N, V, 0.25f, ld);
  EXPECT_EQ(got_fb, want_fb);
  for (int i = 0; i < N; ++i)
    for (int v = 0; v < ld; ++v) {
      const float g = strided[size_t(i) * ld + v];
      if (v < V)
        ASSERT_EQ(g, dense[size_t(i) * V + v]) << "row " << i << " column " << v;
      else
        ASSERT_TRUE(std::isnan(g)) << "padding of row " << i << " written";
    }
}

TEST(CrossEntropy, RejectsTargetOutsideVocabulary) {
  std::vector<float> logits(2 * V, 0.0f), losses(2);
  std::vector<int> t{0, V};
  EXPECT_THROW(cross_entropy_forward(losses.data(), logits.data(), t.data(), 2, V), Error);
  EXPECT_THROW(cross_entropy_forward_backward(logits.data(), losses.data(), t.data(), 2, V, 1.0f), Error);
}

TEST(VecMath, ExpAndTanhAccuracy) {
  double worst = 0.0;
  for (double x = -87.0; x <= 88.5; x += 1e-3) {
    const double ref = std::exp(static_cast<double>(static_cast<float>(x)));
    const double rel = std::abs(vexp(static_cast<float>(x)) - ref) / ref;
    worst = std::max(worst, rel);
  }
  EXPECT_LE(worst, 2.0 * FLT_EPSILON) << "worst relative error " << worst;
  double worst_tanh = 0.0;
  for (double x = -10.0; x <= 10.0; x += 1e-3) {
    const float f = static_cast<float>(x);
    worst_tanh = std::max(worst_tanh, std::abs(vtanh(f) - std::tanh(static_cast<double>(f))));
  }
  EXPECT_LE(worst_tanh, 5e-7);
  EXPECT_EQ(vexp(-100.0f), 0.0f);
  EXPECT_EQ(vexp(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isfinite(vexp(1000.0f)));
  EXPECT_EQ(vexp(0.0f), 1.0f);
}

// The softmax normaliser: against a double sum of the same terms (vexp's), relative 1e-7, where one
// float sum over GPT-2's vocabulary is ~1e-5 off; terms stored exactly when asked, also in place; every
// length around the 128-term blocks.
TEST(VecMath, SumExpShiftedMatchesADoubleSum) {
  for (int64_t n :
       {int64_t(0), int64_t(1), int64_t(127), int64_t(128), int64_t(129), int64_t(1000), int64_t(50257)}) {
    auto x = random_floats(size_t(n), 31, -12.0f, 3.0f);
    float m = 3.0f;
    double ref = 0.0;
    float naive = 0.0f;
    for (float v : x) ref += double(vexp(v - m)), naive += vexp(v - m);
    std::vector<float> e(size_t(n), -1.0f);
    const double got = sum_exp_shifted(x.data(), n, m, e.data());
    EXPECT_NEAR(got, ref, 1e-7 * ref) << "n " << n;
    EXPECT_EQ(sum_exp_shifted(x.data(), n, m), got) << "n " << n;  // the same with or without storing
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(e[size_t(i)], vexp(x[size_t(i)] - m)) << "n " << n << " i " << i;
    const double in_place = sum_exp_shifted(x.data(), n, m, x.data());
    EXPECT_EQ(in_place, got);
    EXPECT_EQ(x, e);
    if (n == 50257) {
      EXPECT_GT(std::abs(double(naive) - ref), 1e-7 * ref) << "a float sum would pass too";
    }
  }
}

}  // namespace cross_entropy_test
