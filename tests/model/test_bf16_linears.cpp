// The bf16 policy on the linear seam (model/bf16_linears.h) against the fp32 kernels on the policy's
// rounded operands: a column linear's output rounded, a row linear's GEMMs over the rounded residual
// gradient with its bias gradient from the fp32 one and its dx rounded; store_activation rounds only the
// columns it names. And the fast path against this emulation: the bf16 GEMM (oneDNN's bf16 matmul, or
// on a host without one the §5.5 fallback) on the same operands, and the native linears
// (ODYSSEY_BF16_GEMM=native: gemm_bf16 on the narrowed operands) against the emulation, call by call and
// over a whole model's forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "odyssey/core/bf16.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/kernels/linear.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/bf16_linears.h"
#include "odyssey/model/vocab_ops.h"

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

// max |a - b| <= tol max |b|: GEMMs that differ only by summation order.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i)
    err = std::max(err, double(std::abs(a[i] - b[i]))), ref = std::max(ref, double(std::abs(b[i])));
  EXPECT_GT(ref, 0) << what;
  EXPECT_LE(err, tol * ref) << what;
}

// Outputs the policy rounds to bf16: the two GEMMs' results may round to neighbours, nothing further.
void expect_within_one_ulp(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(a[i] - b[i]), std::abs(b[i]) * 0x1p-7f + 1e-30f) << what << " at " << i;
}

// Each call of the native linears against the emulation on the same operands, with more rows than one
// block of the scratch (kBf16GemmRows) and the LM head's padded output rows.
TEST(Bf16Linears, NativeCallsMatchTheEmulation) {
  if (!gemm_bf16_native())
    GTEST_SKIP() << "oneDNN creates no bf16 matmul on this CPU: the native path is the fallback";
  const int n = int(2 * kBf16GemmRows + 37), in = 48, out = 72, ld = 80;
  const std::vector<float> x = random(size_t(n) * in, 10, true), W = random(size_t(out) * in, 11, true),
                           b = random(out, 12, true), dy_r = random(size_t(n) * ld, 13, true),
                           dy = random(size_t(n) * out, 14, false);
  Bf16Linears emulated(local_linears()), native(local_linears(), true, {});
  ASSERT_TRUE(native.native());
  ASSERT_FALSE(emulated.native());
  const double tol = 1e-5 * std::sqrt(n / 1024.0 + 1);
  {  // column, as the LM head (padded rows, no bias): y rounded to bf16; dx fp32, dW accumulated
    const LinearCall c{n, in, out, "t", nullptr, ld};
    std::vector<float> y1(size_t(n) * ld), y2 = y1;
    emulated.column_forward(y1.data(), x.data(), W.data(), nullptr, c);
    native.column_forward(y2.data(), x.data(), W.data(), nullptr, c);
    expect_within_one_ulp(y2, y1, "column y");
    std::vector<float> dx1(size_t(n) * in), dx2 = dx1, dW1(size_t(out) * in, 0.5f), dW2 = dW1, db1(out),
                                            db2(out);
    emulated.column_backward(dx1.data(), dW1.data(), db1.data(), dy_r.data(), x.data(), W.data(), c);
    native.column_backward(dx2.data(), dW2.data(), db2.data(), dy_r.data(), x.data(), W.data(), c);
    expect_close(dx2, dx1, tol, "column dx");
    expect_close(dW2, dW1, tol, "column dW");
    EXPECT_EQ(db2, db1);
  }
  {  // row: y fp32; dy the fp32 residual gradient (rounded for the GEMMs), dx rounded
    const LinearCall c{n, in, out, "t"};
    std::vector<float> y1(size_t(n) * out), y2 = y1;
    emulated.row_forward(y1.data(), x.data(), W.data(), b.data(), c);
    native.row_forward(y2.data(), x.data(), W.data(), b.data(), c);
    expect_close(y2, y1, tol, "row y");
    std::vector<float> dx1(size_t(n) * in), dx2 = dx1, dW1(size_t(out) * in, 0.5f), dW2 = dW1, db1(out),
                                            db2(out);
    emulated.row_backward(dx1.data(), dW1.data(), db1.data(), dy.data(), x.data(), W.data(), c);
    native.row_backward(dx2.data(), dW2.data(), db2.data(), dy.data(), x.data(), W.data(), c);
    expect_within_one_ulp(dx2, dx1, "row dx");
    expect_close(dW2, dW1, tol, "row dW");
    EXPECT_EQ(db2, db1);
  }
  // One block of rows of the widest input and output, and the largest weight (the padded one): what the
  // calls needed.
  EXPECT_EQ(native.native_bytes(), size_t(ld) * in * 2 + size_t(kBf16GemmRows) * (in + out) * 2);
}

// A whole model (GPT-2 and Llama: every linear of the blocks and the LM head) through the native
// linears against the emulation: the loss and the gradients of a forward and backward.
TEST(Bf16Linears, NativeModelMatchesTheEmulation) {
  if (!gemm_bf16_native())
    GTEST_SKIP() << "oneDNN creates no bf16 matmul on this CPU: the native path is the fallback";
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    ModelConfig c;
    c.arch = arch;
    c.n_layer = 2, c.n_head = 4, c.d_model = 64, c.seq_len = 64, c.vocab_size = 97;
    if (c.arch == Arch::llama) c.n_kv_head = 2, c.d_ff = 96;
    const int B = 3, T = 64;
    auto run = [&](bool native, std::vector<float>& grads) {
      auto stage = architecture(arch).make_stage(c, StageRange{}, true, {});
      init_parameters(stage->params(), stage->table(), c, 5);
      // The model copy the policy's linears read: every parameter a bf16 value.
      for (int64_t i = 0; i < stage->table().total(); ++i)
        stage->params()[i] = round_to_bf16(stage->params()[i]);
      const Bf16GemmScratch scratch =
          Bf16GemmScratch::of(architecture(arch).block().dims(c, TpSplit{}), B * T, c.vocab_size);
      Bf16Linears linears(local_linears(), native, scratch);
      stage->set_tensor_parallel(&linears, &local_vocab());
      MemoryOptions memory{CheckpointPolicy::none, 0, 0};
      memory.bf16 = true;
      stage->set_memory(memory);
      std::fill(stage->grads(), stage->grads() + stage->table().total(), 0.0f);
      std::vector<int> in(size_t(B * T)), tg(size_t(B * T));
      for (int i = 0; i < B * T; ++i) in[size_t(i)] = (i * 13 + 5) % 97, tg[size_t(i)] = (i * 7 + 3) % 97;
      int64_t n = 0;
      const double loss = stage->forward_backward(in.data(), tg.data(), nullptr, B, T, 1.0f / (B * T), &n);
      grads.assign(stage->grads(), stage->grads() + stage->table().total());
      if (native) {
        EXPECT_EQ(linears.native_bytes(), scratch.bytes())
            << enum_name(kArchNames, arch);  // the reserve was enough
      }
      return loss;
    };
    std::vector<float> g_emulated, g_native;
    const double emulated = run(false, g_emulated), native = run(true, g_native);
    EXPECT_NEAR(native, emulated, 1e-5 * std::abs(emulated)) << enum_name(kArchNames, arch);
    // The stored activations are rounded to bf16: where the two GEMMs' sums fall on either side of a
    // rounding boundary they differ by one bf16 ulp (2^-8 relative), which the backward carries on.
    double diff = 0, norm = 0;
    for (size_t i = 0; i < g_native.size(); ++i)
      diff += double(g_native[i] - g_emulated[i]) * (g_native[i] - g_emulated[i]),
          norm += double(g_emulated[i]) * g_emulated[i];
    EXPECT_LE(std::sqrt(diff), 1e-3 * std::sqrt(norm)) << enum_name(kArchNames, arch);
  }
}

}  // namespace
}  // namespace odyssey
