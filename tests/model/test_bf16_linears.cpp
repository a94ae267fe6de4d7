// The bf16 policy on the linear seam (model/bf16_linears.h) against the fp32 kernels on the policy's
// rounded operands: a column linear's output rounded, a row linear's GEMMs over the rounded residual
// gradient with its bias gradient from the fp32 one and its dx rounded; store_activation rounds only the
// columns it names. And the fast path against this emulation: the bf16 GEMM (oneDNN's bf16 matmul, or
// on a host without one the §5.5 fallback) on the same operands.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "odyssey/core/bf16.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/kernels/linear.h"
#include "odyssey/model/bf16_linears.h"

namespace odyssey {
namespace {

std::vector<float> random(size_t n, unsigned seed, bool rounded) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = rounded ? round_to_bf16(d(g)) : d(g);
  return v;
}

bool all_bf16(const std::vector<float>& v) {
  for (float x : v)
    if (round_to_bf16(x) != x) return false;
  return true;
}

constexpr int N = 24, IN = 40, OUT = 56;

TEST(Bf16Linears, ColumnForwardStoresItsOutputInBf16) {
  const std::vector<float> x = random(N * IN, 1, true), W = random(OUT * IN, 2, true),
                           b = random(OUT, 3, true);
  std::vector<float> y(N * OUT), ref(N * OUT);
  Bf16Linears lin(local_linears());
  lin.column_forward(y.data(), x.data(), W.data(), b.data(), {N, IN, OUT});
  linear_forward(ref.data(), x.data(), W.data(), b.data(), N, IN, OUT);
  EXPECT_FALSE(all_bf16(ref));
  for (float& r : ref) r = round_to_bf16(r);
  EXPECT_EQ(y, ref);
}

TEST(Bf16Linears, RowBackwardRoundsTheResidualGradientForItsGemmsOnly) {
  const std::vector<float> x = random(N * IN, 4, true), W = random(OUT * IN, 5, true),
                           dy = random(N * OUT, 6, false);
  std::vector<float> dx(N * IN), dW(OUT * IN, 0.5f), db(OUT, 0.25f);
  std::vector<float> dx_ref(N * IN), dW_ref = dW, db_ref = db, dy_r(dy.size());
  Bf16Linears lin(local_linears());
  lin.row_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), {N, IN, OUT});
  for (size_t i = 0; i < dy.size(); ++i) dy_r[i] = round_to_bf16(dy[i]);
  linear_backward_input(dx_ref.data(), dy_r.data(), W.data(), N, IN, OUT);
  for (float& r : dx_ref) r = round_to_bf16(r);
  linear_backward_weight(dW_ref.data(), dy_r.data(), x.data(), N, IN, OUT);
  linear_backward_bias(db_ref.data(), dy.data(), N, OUT);  // the fp32 residual gradient
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(dW, dW_ref);
  EXPECT_EQ(db, db_ref);
}

TEST(Bf16Linears, StoreActivationRoundsTheNamedColumnsOnly) {
  const int rows = 5, cols = 7, ld = 16;
  std::vector<float> x = random(rows * ld, 7, false), before = x;
  Bf16Linears lin(local_linears());
  lin.store_activation(x.data(), rows, cols, ld);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ld; ++c) {
      const float b = before[size_t(r * ld + c)];
      EXPECT_EQ(x[size_t(r * ld + c)], c < cols ? round_to_bf16(b) : b) << r << "," << c;
    }
}

// §9 "fast path vs emulation": the bf16 GEMM on bf16 operands against the fp32 GEMM of the same values
// widened (what the policy computes): bitwise on the fallback (the same fp32 GEMM), otherwise within
// the spec's GEMM tolerance (summation order).
TEST(Bf16Linears, Bf16GemmMatchesTheEmulation) {
  const std::vector<float> x = random(N * IN, 8, true), W = random(OUT * IN, 9, true);
  std::vector<bf16> xb(x.size()), Wb(W.size());
  convert_to_bf16(x.data(), xb.data(), x.size());
  convert_to_bf16(W.data(), Wb.data(), W.size());
  std::vector<float> fast(N * OUT), emulated(N * OUT);
  gemm_bf16(fast.data(), xb.data(), Wb.data(), nullptr, N, OUT, IN, false, true, false);
  local_linears().column_forward(emulated.data(), x.data(), W.data(), nullptr, {N, IN, OUT});
  if (!gemm_bf16_native()) {
    EXPECT_EQ(fast, emulated);
    return;
  }
  double err = 0, ref = 0;
  for (size_t i = 0; i < fast.size(); ++i)
    err = std::max(err, double(std::abs(fast[i] - emulated[i]))),
    ref = std::max(ref, double(std::abs(emulated[i])));
  EXPECT_LE(err, 1e-5 * std::sqrt(IN / 1024.0 + 1) * ref);
}

}  // namespace
}  // namespace odyssey
