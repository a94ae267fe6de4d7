// RoPE: the inverse frequencies against tensor-pipeline-parallelism.md §5.5's fp32 test vector (plain
// and Llama-3-scaled, with the counts of kept / smoothed / divided frequencies); the cos/sin tables
// against the fp32 angle HF forms (not the fp64 one, which differs by up to 5e-3 rad at large
// positions); rope_forward against a double rotate-half reference on a strided (fused-qkv) layout that
// must leave the other columns alone; rope_backward as the exact adjoint (finite differences of
// L = sum(rope(x) * R)) and the inverse of forward.
#include "odyssey/kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace rope_test {

struct Counts {
  int kept = 0, smoothed = 0, divided = 0;
};

Counts classify(const std::vector<float>& plain, const std::vector<float>& scaled, float factor) {
  Counts c;
  for (size_t i = 0; i < plain.size(); ++i) {
    if (scaled[i] == plain[i])
      ++c.kept;
    else if (scaled[i] == plain[i] / factor)
      ++c.divided;
    else {
      ++c.smoothed;
      EXPECT_GT(scaled[i], plain[i] / factor) << i;  // between the two ends
      EXPECT_LT(scaled[i], plain[i]) << i;
    }
  }
  return c;
}

void expect_rel(float got, double want, const char* what, int i) {
  EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << what << "[" << i << "]";
}

TEST(Rope, InverseFrequenciesMatchLlama31TestVector) {
  const RopeScalingParams none{};
  const RopeScalingParams llama3{true, 8, 1, 4, 8192};
  const auto plain = rope_inv_freq(128, 500000, none), scaled = rope_inv_freq(128, 500000, llama3);
  ASSERT_EQ(plain.size(), 64u);
  const Counts c = classify(plain, scaled, 8);
  EXPECT_EQ(c.kept, 29);
  EXPECT_EQ(c.smoothed, 6);
  EXPECT_EQ(c.divided, 29);
  EXPECT_EQ(plain[0], 1.0f);
  EXPECT_EQ(scaled[0], 1.0f);
  expect_rel(plain[28], 3.211446106e-3, "plain", 28);
  expect_rel(scaled[28], 3.211446106e-3, "scaled", 28);
  expect_rel(plain[29], 2.616099082e-3, "plain", 29);
  expect_rel(scaled[29], 2.166570630e-3, "scaled", 29);
  expect_rel(plain[34], 9.384738514e-4, "plain", 34);
  expect_rel(scaled[34], 1.785077911e-4, "scaled", 34);
  expect_rel(plain[63], 2.455140702e-6, "plain", 63);
  expect_rel(scaled[63], 3.068925878e-7, "scaled", 63);
}

TEST(Rope, InverseFrequenciesMatchLlama32TestVector) {
  const auto plain = rope_inv_freq(64, 500000, {});
  const auto scaled = rope_inv_freq(64, 500000, {true, 32, 1, 4, 8192});
  const Counts c = classify(plain, scaled, 32);
  EXPECT_EQ(c.kept, 15);
  EXPECT_EQ(c.smoothed, 3);
  EXPECT_EQ(c.divided, 14);
  expect_rel(plain[15], 2.131119603e-3, "plain", 15);
  expect_rel(scaled[15], 1.290548011e-3, "scaled", 15);
  expect_rel(plain[17], 9.384738514e-4, "plain", 17);
  expect_rel(scaled[17], 9.708286234e-5, "scaled", 17);
  expect_rel(plain[31], 3.013858077e-6, "plain", 31);
  expect_rel(scaled[31], 9.418306490e-8, "scaled", 31);
}

TEST(Rope, TablesUseTheFp32Angle) {
  constexpr int D = 64, half = D / 2;
  const auto inv = rope_inv_freq(D, 500000, {true, 32, 1, 4, 8192});
  const std::vector<int> pos = {0, 1, 7, 4095, 131071};
  std::vector<float> cos(pos.size() * half), sin(cos.size());
  rope_tables(cos.data(), sin.data(), pos.data(), int(pos.size()), inv.data(), D);
  double fp64_gap = 0;
  for (size_t n = 0; n < pos.size(); ++n)
    for (int i = 0; i < half; ++i) {
      const float angle = float(pos[n]) * inv[size_t(i)];
      const size_t j = n * half + size_t(i);
      EXPECT_NEAR(cos[j], std::cos(double(angle)), 2e-6) << pos[n] << "," << i;
      EXPECT_NEAR(sin[j], std::sin(double(angle)), 2e-6) << pos[n] << "," << i;
      fp64_gap = std::max(fp64_gap, std::abs(cos[j] - std::cos(double(pos[n]) * double(inv[size_t(i)]))));
    }
  EXPECT_GT(fp64_gap, 1e-4);  // the fp64 angle would have given other tables
}

// Tokens of `heads` heads of D at stride S (> heads * D: the rest of a fused qkv row).
constexpr int N = 13, heads = 3, D = 10, half = D / 2, S = 37, offset = 4;

struct Layout {
  std::vector<float> inv = rope_inv_freq(D, 10000, {});
  std::vector<int> pos = random_ints(N, 5, 0, 70000);  // arbitrary global positions (zigzag shards)
  std::vector<float> cos = std::vector<float>(size_t(N) * half), sin = cos;
  Layout() { rope_tables(cos.data(), sin.data(), pos.data(), N, inv.data(), D); }
};

std::vector<double> rope_reference(const std::vector<double>& x, const Layout& l) {
  std::vector<double> y = x;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const size_t lo = size_t(n) * S + offset + size_t(h) * D + size_t(i), hi = lo + half;
        const double c = l.cos[size_t(n) * half + size_t(i)], s = l.sin[size_t(n) * half + size_t(i)];
        y[lo] = x[lo] * c - x[hi] * s;
        y[hi] = x[hi] * c + x[lo] * s;
      }
  return y;
}

TEST(Rope, ForwardMatchesReferenceOnAStridedLayout) {
  const Layout l;
  auto x = random_floats(size_t(N) * S, 1);
  const auto want = rope_reference(to_double(x), l);
  rope_forward(x.data() + offset, S, N, heads, D, l.cos.data(), l.sin.data());
  expect_close(x, want, 1e-6, 1e-6, "rotated");  // columns outside the heads: equal (want copies them)
}

TEST(Rope, BackwardIsTheAdjointAndTheInverse) {
  const Layout l;
  auto R = random_floats(size_t(N) * S, 2);
  auto dx = R;
  rope_backward(dx.data() + offset, S, N, heads, D, l.cos.data(), l.sin.data());
  auto xd = to_double(random_floats(size_t(N) * S, 3));
  const auto r = to_double(R);
  auto loss = [&] { return dot(rope_reference(xd, l), r); };
  for (size_t i = 0; i < xd.size(); ++i) {
    const double expected = central_difference(xd, i, 1e-3, loss);  // linear: exact up to rounding
    EXPECT_NEAR(dx[i], expected, 1e-6 + 1e-6 * std::abs(expected)) << i;
  }
  auto x = random_floats(size_t(N) * S, 4);
  const auto original = x;
  rope_forward(x.data() + offset, S, N, heads, D, l.cos.data(), l.sin.data());
  rope_backward(x.data() + offset, S, N, heads, D, l.cos.data(), l.sin.data());
  expect_close(x, to_double(original), 1e-6, 1e-6, "backward(forward(x))");
}

}  // namespace rope_test
