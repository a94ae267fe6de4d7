// gemm_bf16 (kernels/gemm.h) against a float64 GEMM of the same bf16 operands (mixed-precision.md §9):
// every transpose / accumulate / bias combination, dst f32 and bf16, odd shapes (K of 1, 3, 17: not a
// multiple of 2 or 16), strided rows. Tolerances (the spec's): f32 dst max-abs-err / max-abs-ref
// <= 1e-5 sqrt(K / 1024), with the bound at K = 1024 for smaller K (fp32 summation of K exact products
// errs by ~K eps relative to sum |a b|, which a random-sign max-abs-ref does not bound below 1e-5 at small
// K); bf16 dst within 1 bf16 ulp of the float64 result plus that f32 bound (the bf16 C is the fp32
// result rounded once: where a sum cancels to a small value, the fp32 summation's error alone exceeds
// that value's bf16 ulp; seen: 1.6 ulp at K = 257). Dispatch as §5.6: the implementation oneDNN
// chose must match the ISA it reports, or the fallback must be taken; on the fallback the result is the
// fp32 gemm() of the widened operands, bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "odyssey/core/bf16.h"
#include "odyssey/core/error.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/gemm.h"
#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  const auto f = random_floats(n, seed);
  std::vector<bf16> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = to_bf16(f[i]);
  return b;
}

double bf16_ulp(double x) {  // the spacing of bf16 values at |x| (8 significant bits)
  return x == 0 ? std::ldexp(1.0, -133) : std::ldexp(1.0, std::ilogb(x) - 7);
}

struct Bf16Case {
  int M, N, K;
  bool trans_a, trans_b, accumulate, bias, dst_bf16;
  int pad_a = 0, pad_c = 0;
};

void check(const Bf16Case& p, uint32_t seed) {
  const auto [M, N, K, ta, tb, acc, has_bias, dst_bf16, pad_a, pad_c] = p;
  const size_t lda = size_t((ta ? M : K) + pad_a), ldc = size_t(N + pad_c);
  const auto A = random_bf16(size_t(ta ? K : M) * lda, seed);
  const auto B = random_bf16(size_t(K) * N, seed + 1);
  const auto bias = random_floats(N, seed + 2);
  const auto C0f = random_floats(size_t(M) * ldc, seed + 3);  // the accumulate base; garbage otherwise
  std::vector<bf16> C0b(C0f.size());
  for (size_t i = 0; i < C0f.size(); ++i) C0b[i] = to_bf16(C0f[i]);
  std::vector<float> Cf = C0f;
  std::vector<bf16> Cb = C0b;
  const GemmLd ld{pad_a ? int64_t(lda) : 0, pad_c ? int64_t(ldc) : 0};
  const float* b = has_bias ? bias.data() : nullptr;
  if (dst_bf16)
    gemm_bf16(Cb.data(), A.data(), B.data(), b, M, N, K, ta, tb, acc, ld);
  else
    gemm_bf16(Cf.data(), A.data(), B.data(), b, M, N, K, ta, tb, acc, ld);

  double max_err = 0, max_ref = 0;
  std::vector<std::pair<double, double>> errs;  // (error, float64 result)
  int padding_changed = 0;
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double sum = 0;
      for (int k = 0; k < K; ++k) {
        const double a = bf16_to_float(ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k]);
        const double w = bf16_to_float(tb ? B[size_t(j) * K + k] : B[size_t(k) * N + j]);
        sum += a * w;
      }
      const size_t ij = size_t(i) * ldc + j;
      if (has_bias) sum += bias[j];
      if (acc) sum += dst_bf16 ? double(bf16_to_float(C0b[ij])) : double(C0f[ij]);
      const double got = dst_bf16 ? double(bf16_to_float(Cb[ij])) : double(Cf[ij]);
      max_err = std::max(max_err, std::fabs(got - sum));
      max_ref = std::max(max_ref, std::fabs(sum));
      errs.push_back({got - sum, sum});
    }
    for (size_t j = size_t(N); j < ldc; ++j) {
      const size_t ij = size_t(i) * ldc + j;
      padding_changed += dst_bf16 ? Cb[ij] != C0b[ij] : Cf[ij] != C0f[ij];
    }
  }
  const std::string what =
      fmt::format("M={} N={} K={} ta={} tb={} acc={} bias={} dst={} pad_a={} pad_c={}", M, N, K, ta, tb, acc,
                  has_bias, dst_bf16 ? "bf16" : "f32", pad_a, pad_c);
  EXPECT_EQ(padding_changed, 0) << what;
  const double f32_bound = 1e-5 * std::sqrt(std::max(K, 1024) / 1024.0) * max_ref;
  if (dst_bf16) {
    double worst = 0;  // in units of the allowed error
    for (auto [err, ref] : errs) worst = std::max(worst, std::fabs(err) / (bf16_ulp(ref) + f32_bound));
    EXPECT_LE(worst, 1.0) << what;
  } else {
    EXPECT_LE(max_err, f32_bound) << what << " relative error " << max_err / max_ref;
  }
}

class GemmBf16Combos : public testing::TestWithParam<std::tuple<bool, bool, bool, bool, bool>> {};

TEST_P(GemmBf16Combos, MatchesFloat64OnTheSameBf16Operands) {
  const auto [ta, tb, acc, bias, dst_bf16] = GetParam();
  uint32_t seed = 1;
  for (auto [M, N, K] :
       {std::tuple{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 48, 17}, {5, 130, 1000}, {129, 67, 257}})
    check({M, N, K, ta, tb, acc, bias, dst_bf16}, seed += 4);
  check({37, 29, 31, ta, tb, acc, bias, dst_bf16, 3, 5}, seed += 4);  // strided rows of A and C
}

INSTANTIATE_TEST_SUITE_P(AllCombos, GemmBf16Combos,
                         testing::Combine(testing::Bool(), testing::Bool(), testing::Bool(), testing::Bool(),
                                          testing::Bool()));

// The linears' three orientations (forward X W^T, dX = dY W, dW += dY^T X) at GPT-2 124M's widths with
// 256 tokens, and the LM head's odd vocabulary: the implementation the ISA requires (§5.6).
TEST(GemmBf16, DispatchAsTheIsaRequires) {
  const std::string isa = onednn_isa();
  const int T = 256, C = 768;
  struct Shape {
    const char* what;
    int M, N, K;
    bool ta, tb, acc, dst_bf16;
  };
  for (const Shape& s : {Shape{"qkv forward", T, 3 * C, C, false, true, false, true},
                         Shape{"fc-proj forward (residual sum)", T, C, 4 * C, false, true, true, false},
                         Shape{"qkv dX", T, C, 3 * C, false, false, false, false},
                         Shape{"qkv dW (accumulate)", 3 * C, C, T, true, false, true, false},
                         Shape{"LM head forward", T, 50257, C, false, true, false, true}}) {
    const std::string impl = gemm_bf16_implementation(s.M, s.N, s.K, s.ta, s.tb, s.acc, false, s.dst_bf16);
    std::printf("oneDNN ISA %s, %s %dx%dx%d: %s\n", isa.c_str(), s.what, s.M, s.N, s.K, impl.c_str());
    if (isa == "avx512_core_amx") {
      EXPECT_NE(impl.find("amx"), std::string::npos) << s.what;
    } else if (isa == "avx512_core_bf16") {
      EXPECT_NE(impl.find("bf16"), std::string::npos) << s.what;
    } else if (isa.rfind("avx512_core", 0) == 0) {
      EXPECT_NE(impl, "fallback") << s.what;  // AVX-512 without bf16 instructions: oneDNN's emulation
    } else {
      EXPECT_EQ(impl, "fallback") << s.what;
      EXPECT_FALSE(gemm_bf16_native());
    }
  }
  for (const std::string& line : gemm_bf16_primitives()) std::printf("  created: %s\n", line.c_str());
}

// On the fallback the result is gemm() on the widened operands, bit for bit (same dst semantics); on a
// native host it is within the f32 tolerance of it.
TEST(GemmBf16, FallbackIsTheFp32GemmOfTheWidenedOperands) {
  const int M = 45, N = 70, K = 90;
  const auto A = random_bf16(size_t(K) * M, 5), B = random_bf16(size_t(N) * K, 6);
  const auto bias = random_floats(N, 7);
  std::vector<float> Af(A.size()), Bf(B.size());
  for (size_t i = 0; i < A.size(); ++i) Af[i] = bf16_to_float(A[i]);
  for (size_t i = 0; i < B.size(); ++i) Bf[i] = bf16_to_float(B[i]);
  auto got = random_floats(size_t(M) * N, 8);
  auto want = got;
  std::vector<bf16> got_b(got.size()), want_b(got.size());
  for (size_t i = 0; i < got.size(); ++i) got_b[i] = to_bf16(got[i]);
  gemm_bf16(got.data(), A.data(), B.data(), bias.data(), M, N, K, true, true, true);
  gemm(want.data(), Af.data(), Bf.data(), bias.data(), M, N, K, true, true, true);
  std::vector<float> wide(got.size());
  for (size_t i = 0; i < got.size(); ++i) wide[i] = bf16_to_float(got_b[i]);
  gemm_bf16(got_b.data(), A.data(), B.data(), bias.data(), M, N, K, true, true, true);
  gemm(wide.data(), Af.data(), Bf.data(), bias.data(), M, N, K, true, true, true);
  for (size_t i = 0; i < got.size(); ++i) want_b[i] = to_bf16(wide[i]);
  if (!gemm_bf16_native()) {
    EXPECT_EQ(got, want);
    EXPECT_TRUE(got_b == want_b);
  } else {
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_err = std::max(max_err, double(std::fabs(got[i] - want[i]))),
      max_ref = std::max(max_ref, double(std::fabs(want[i])));
    EXPECT_LE(max_err, 1e-5 * max_ref);
  }
}

TEST(GemmBf16, EmptyReductionAndRejections) {
  std::vector<bf16> none;
  std::vector<float> C{1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> bias{0.5f, -1.0f};
  gemm_bf16(C.data(), none.data(), none.data(), bias.data(), 2, 2, 0, false, false, true);
  EXPECT_EQ(C, (std::vector<float>{1.5f, 1.0f, 3.5f, 3.0f}));
  std::vector<bf16> Cb{to_bf16(1.0f), to_bf16(2.0f)};
  gemm_bf16(Cb.data(), none.data(), none.data(), bias.data(), 1, 2, 0, false, false, false);
  EXPECT_EQ(bf16_to_float(Cb[0]), 0.5f);
  EXPECT_EQ(bf16_to_float(Cb[1]), -1.0f);
  EXPECT_THROW(gemm_bf16(C.data(), none.data(), none.data(), nullptr, -1, 2, 2, false, false, false), Error);
  EXPECT_THROW(gemm_bf16(C.data(), none.data(), none.data(), nullptr, 2, 2, 4, false, false, false, {2, 0}),
               Error);
}

}  // namespace
