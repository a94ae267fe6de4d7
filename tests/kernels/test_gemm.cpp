// gemm() against a double-precision reference, for every transpose / accumulate / bias combination
// on odd, non-square shapes. Tolerance per element: 2 (K + 2) FLT_EPSILON * (sum_k |a_ik b_kj| +
// |bias_j| + |C0_ij|), the standard worst-case bound for a float dot product of length K (+2 adds).
#include "odyssey/kernels/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <tuple>

#include "odyssey/core/error.h"
#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct Case {
  int M, N, K;
  bool trans_a, trans_b, accumulate, bias;
  int pad_a = 0, pad_c = 0;  // floats after each stored row of A and of C (GemmLd); 0: dense
};

void check_gemm(const Case& p, uint32_t seed) {
  const auto [M, N, K, ta, tb, acc, has_bias, pad_a, pad_c] = p;
  const size_t lda = size_t((ta ? M : K) + pad_a), ldc = size_t(N + pad_c);
  auto A = random_floats(size_t(ta ? K : M) * lda, seed);
  auto B = random_floats(static_cast<size_t>(K) * N, seed + 1);
  auto bias = random_floats(N, seed + 2);
  auto C = random_floats(size_t(M) * ldc, seed + 3);  // the accumulate base; garbage otherwise
  const auto C0 = C;
  const GemmLd ld{pad_a ? int64_t(lda) : 0, pad_c ? int64_t(ldc) : 0};

  gemm(C.data(), A.data(), B.data(), has_bias ? bias.data() : nullptr, M, N, K, ta, tb, acc, ld);

  std::vector<double> ref(C.size()), tol(C.size());
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        const double b = tb ? B[static_cast<size_t>(j) * K + k] : B[static_cast<size_t>(k) * N + j];
        sum += a * b;
        abs_sum += std::abs(a * b);
      }
      const size_t ij = size_t(i) * ldc + j;
      if (has_bias) sum += bias[j], abs_sum += std::abs(bias[j]);
      if (acc) sum += C0[ij], abs_sum += std::abs(C0[ij]);
      ref[ij] = sum;
      tol[ij] = 2.0 * (K + 2) * FLT_EPSILON * abs_sum + 1e-30;
    }
  }
  int failures = 0;
  for (size_t ij = 0; ij < C.size() && failures < 5; ++ij) {
    const bool padding = int(ij % ldc) >= N;  // never written
    if (padding ? C[ij] != C0[ij] : !(std::abs(C[ij] - ref[ij]) <= tol[ij])) {
      ++failures;
      ADD_FAILURE() << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " acc=" << acc
                    << " bias=" << has_bias << " lda=" << lda << " ldc=" << ldc << " at " << ij
                    << (padding ? " (padding)" : "") << ": got " << C[ij] << " expected "
                    << (padding ? C0[ij] : ref[ij]);
    }
  }
}

class GemmCombos : public ::testing::TestWithParam<std::tuple<bool, bool, bool, bool>> {};

TEST_P(GemmCombos, MatchesDoubleReferenceOnOddShapes) {
  const auto [ta, tb, acc, bias] = GetParam();
  uint32_t seed = 1;
  for (auto [M, N, K] : {std::tuple{37, 53, 29}, {53, 29, 37}, {1, 67, 40}, {111, 1, 5}, {1, 1, 1}})
    check_gemm({M, N, K, ta, tb, acc, bias}, seed += 10);
}

// A and C with rows wider than the matrix (GemmLd: the LM head's padded logits block), every combination.
TEST_P(GemmCombos, StridedRowsMatchDoubleReference) {
  const auto [ta, tb, acc, bias] = GetParam();
  uint32_t seed = 500;
  for (auto [M, N, K, pa, pc] :
       {std::tuple{37, 53, 29, 3, 11}, {53, 29, 37, 16, 0}, {1, 67, 40, 0, 5}, {111, 1, 5, 1, 1}})
    check_gemm({M, N, K, ta, tb, acc, bias, pa, pc}, seed += 10);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmCombos,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool()));

// Shapes large enough that oneDNN blocks over K and threads over M/N.
TEST(Gemm, LargerShapes) {
  check_gemm({130, 257, 300, false, true, true, true}, 100);
  check_gemm({257, 130, 300, true, false, true, false}, 200);
}

// A cached primitive is reused with new pointers and data, and a change of thread count is honoured.
TEST(Gemm, CacheReuseAndThreadCount) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 1}) {
    omp_set_num_threads(threads);
    check_gemm({37, 53, 29, false, true, false, true}, 300 + threads);
  }
  omp_set_num_threads(saved);
}

// K = 0 is an empty product: C = bias (+ C).
TEST(Gemm, EmptyReduction) {
  std::vector<float> C{1, 2, 3, 4, 5, 6}, bias{10, 20, 30};
  gemm(C.data(), nullptr, nullptr, bias.data(), 2, 3, 0, false, false, true);
  EXPECT_EQ(C, (std::vector<float>{11, 22, 33, 14, 25, 36}));
  gemm(C.data(), nullptr, nullptr, nullptr, 2, 3, 0, false, false, false);
  EXPECT_EQ(C, (std::vector<float>(6, 0.0f)));
}

TEST(Gemm, RejectsNegativeSizes) {
  float c = 0;
  EXPECT_THROW(gemm(&c, &c, &c, nullptr, -1, 1, 1, false, false, false), Error);
}

TEST(Gemm, RejectsRowStridesNarrowerThanTheMatrix) {
  std::vector<float> a(64), b(64), c(64);
  EXPECT_THROW(gemm(c.data(), a.data(), b.data(), nullptr, 4, 4, 4, false, false, false, {.a = 3}), Error);
  EXPECT_THROW(gemm(c.data(), a.data(), b.data(), nullptr, 4, 5, 3, true, false, false, {.a = 3}), Error);
  EXPECT_THROW(gemm(c.data(), a.data(), b.data(), nullptr, 4, 4, 4, false, false, false, {.c = 2}), Error);
}

TEST(Gemm, MeasuresPositiveThroughput) {
  const double gflops = measure_gemm_gflops(64, 0.01);
  EXPECT_GT(gflops, 0.0);
  EXPECT_TRUE(std::isfinite(gflops));
}

}  // namespace

// A wide row-major B (N >= 2048, M >= 256) goes through a padded copy (gemm.h): that path against the
// double reference, every transpose of A, with and without accumulate and bias, and against the
// unpadded path (ODYSSEY_GEMM_PAD_B=0) within the same bound.
TEST(Gemm, PaddedWideBMatchesReferenceAndUnpaddedPath) {
  ASSERT_TRUE(gemm_pad_b()) << "the padded path is the default";
  uint32_t seed = 300;
  for (bool ta : {false, true})
    for (bool acc : {false, true}) check_gemm({257, 2050, 19, ta, false, acc, acc}, seed += 10);
  // The same product both ways: not the same bits (another blocking), within rounding.
  const int M = 300, N = 3072, K = 64;
  auto A = random_floats(size_t(M) * K, 7), B = random_floats(size_t(K) * N, 8);
  std::vector<float> padded(size_t(M) * N), plain(size_t(M) * N);
  gemm(padded.data(), A.data(), B.data(), nullptr, M, N, K, false, false, false);
  set_gemm_pad_b(false);
  gemm(plain.data(), A.data(), B.data(), nullptr, M, N, K, false, false, false);
  set_gemm_pad_b(true);
  double worst = 0;
  for (size_t i = 0; i < plain.size(); ++i) worst = std::max(worst, double(std::abs(padded[i] - plain[i])));
  EXPECT_LE(worst, 2.0 * (K + 2) * FLT_EPSILON * K);  // |a|, |b| <= 1: sum |a b| <= K
}

TEST(Gemm, PadSettingFromEnvironment) {
  setenv("ODYSSEY_GEMM_PAD_B", "0", 1);
  gemm_pad_b_from_env();
  EXPECT_FALSE(gemm_pad_b());
  setenv("ODYSSEY_GEMM_PAD_B", "yes", 1);
  try {
    gemm_pad_b_from_env();
    ADD_FAILURE() << "ODYSSEY_GEMM_PAD_B=yes was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ODYSSEY_GEMM_PAD_B=yes"), std::string::npos) << e.what();
  }
  unsetenv("ODYSSEY_GEMM_PAD_B");
  gemm_pad_b_from_env();
  EXPECT_TRUE(gemm_pad_b());
  EXPECT_GT(gemm_scratch_bytes(3072), 0u);  // GPT-2 124M's MLP
  EXPECT_EQ(gemm_scratch_bytes(768), 0u);   // never padded
}
