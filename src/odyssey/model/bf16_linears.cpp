#include "odyssey/model/bf16_linears.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "odyssey/core/error.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/bf16_round.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/model/lm_head.h"

namespace odyssey {

namespace {

Bf16GemmMode mode_from_env() {
  const char* env = std::getenv("ODYSSEY_BF16_GEMM");
  const std::string value = env ? env : "";
  if (value == "emulate") return Bf16GemmMode::emulate;
  if (value == "native") return Bf16GemmMode::native;
  ODY_CHECK(value.empty() || value == "auto", "ODYSSEY_BF16_GEMM={}: expected emulate, native or auto",
            value);
  return gemm_bf16_native() ? Bf16GemmMode::native : Bf16GemmMode::emulate;
}

// rows [rows, cols] of x (ld apart; 0: cols) narrowed into y [rows, cols]: exact on bf16 values (the
// values the policy rounded), RNE otherwise (a row linear's fp32 dy: the emulation's rounded copy).
void narrow_rows(bf16* y, const float* x, int64_t rows, int64_t cols, int64_t ld) {
  if (ld == 0 || ld == cols) return convert_to_bf16(x, y, size_t(rows * cols));
  const auto nearest = bf16_convert_path().nearest;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) nearest(x + r * ld, y + r * cols, size_t(cols));
}

double gemm_flops(int64_t m, const LinearCall& c) {
  return 2.0 * double(m) * c.in * c.out;
}

// f observed as "<kind><tag>" (the name built only when there is an observer), as LocalLinears' GEMMs.
template <typename F>
void observed_as(const LinearCall& c, const char* kind, double flops, F&& f) {
  if (!c.observer) return f();
  observed(c.observer, (std::string(kind) + c.tag).c_str(), flops, f);
}

}  // namespace

Bf16GemmMode bf16_gemm_mode() {
  static const Bf16GemmMode mode = mode_from_env();
  return mode;
}

Bf16GemmScratch Bf16GemmScratch::of(const BlockDims& d, int64_t tokens, int64_t vocab_rows) {
  const int64_t rows = std::min(tokens, kBf16GemmRows), C = d.C;
  const int64_t in = std::max<int64_t>({C, d.attention_width(), d.act});
  const int64_t out = std::max<int64_t>({C, d.qkv_width(), d.up, vocab_rows});
  const int64_t head = vocab_rows > 0 ? logits_row_stride(vocab_rows) * C : 0;  // its padded rows
  const int64_t weight =
      std::max<int64_t>({d.qkv_width() * C, d.up * C, C * d.attention_width(), C * d.act, head});
  return {size_t(weight), size_t(rows * in), size_t(rows * out)};
}

Bf16Linears::Bf16Linears(LinearOps& inner, bool native, const Bf16GemmScratch& scratch)
    : inner_(inner), native_(native && inner.tp() == 1) {
  if (!native_) return;
  w16_.resize(scratch.weight);
  x16_.resize(scratch.in);
  dy16_.resize(scratch.out);
}

// Rows in blocks of kBf16GemmRows: the scratch holds one block of x (and dy), whatever the call's n.
// The LM head's padded logits rows (ld_out > out, no bias): the weight is narrowed into ld_out rows, the
// last ld_out - out zero, and the GEMM writes whole rows (zeros in the padding columns, which nothing
// reads): oneDNN creates a brgemm for a dense bf16 destination, only its slower gemm:jit for a strided
// one (0.6-0.8x the rate at GPT-2's 512 x 50257 x 512).
void Bf16Linears::native_forward(float* y, const float* x, const float* W, const float* b,
                                 const LinearCall& c) {
  const int64_t ldy = c.ld_out > 0 ? c.ld_out : c.out;
  const int64_t N = b ? c.out : ldy;
  const size_t weight = size_t(c.out) * size_t(c.in), padded = size_t(N) * size_t(c.in);
  bf16* w = w16_.at_least(padded);
  observed(c.observer, "bf16.narrow", 0, [&] {
    convert_to_bf16(W, w, weight);
    std::fill(w + weight, w + padded, bf16{0});
  });
  for (int64_t r = 0; r < c.n; r += kBf16GemmRows) {
    const int64_t m = std::min(kBf16GemmRows, c.n - r);
    bf16* xm = x16_.at_least(size_t(m * c.in));
    observed(c.observer, "bf16.narrow", 0, [&] { narrow_rows(xm, x + r * c.in, m, c.in, 0); });
    observed_as(c, "gemm.fwd.", gemm_flops(m, c), [&] {
      gemm_bf16(y + r * ldy, xm, w, b, int(m), int(N), c.in, false, true, false, {.c = N == ldy ? 0 : ldy});
    });
  }
}

void Bf16Linears::native_backward(float* dx, float* dW, const float* dy, const float* x, const float* W,
                                  const LinearCall& c) {
  const int64_t ldy = c.ld_out > 0 ? c.ld_out : c.out;
  bf16* w = w16_.at_least(size_t(c.out) * size_t(c.in));
  observed(c.observer, "bf16.narrow", 0, [&] { convert_to_bf16(W, w, size_t(c.out) * size_t(c.in)); });
  for (int64_t r = 0; r < c.n; r += kBf16GemmRows) {
    const int64_t m = std::min(kBf16GemmRows, c.n - r);
    bf16* dym = dy16_.at_least(size_t(m * c.out));
    bf16* xm = x16_.at_least(size_t(m * c.in));
    observed(c.observer, "bf16.narrow", 0, [&] {
      narrow_rows(dym, dy + r * ldy, m, c.out, ldy);
      narrow_rows(xm, x + r * c.in, m, c.in, 0);
    });
    // dx [m, in] = dy [m, out] @ W [out, in]
    observed_as(c, "gemm.dinp.", gemm_flops(m, c),
                [&] { gemm_bf16(dx + r * c.in, dym, w, nullptr, int(m), c.in, c.out, false, false, false); });
    // dW [out, in] += dy^T [out, m] @ x [m, in]
    observed_as(c, "gemm.dweight.", gemm_flops(m, c),
                [&] { gemm_bf16(dW, dym, xm, nullptr, c.out, c.in, int(m), true, false, true); });
  }
}

void Bf16Linears::store_activation(float* x, int64_t rows, int64_t cols, int64_t ld) {
  round_bf16_rows(x, rows, cols, ld);
}

const float* Bf16Linears::rounded_dy(const float* dy, int64_t rows, int out) {
  const size_t n = size_t(rows) * size_t(out);
  if (dy_.size() < n) dy_.resize(n);
  copy_round_bf16(dy_.data(), dy, n);
  return dy_.data();
}

// x (a norm output) was stored rounded; the output (qkv, up, logits) is stored in bf16.
void Bf16Linears::column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                                 const LinearCall& c) {
  if (native_)
    native_forward(y_r, x, W_r, b_r, c);
  else
    inner_.column_forward(y_r, x, W_r, b_r, c);
  round_bf16_rows(y_r, c.n, c.out, c.ld_out);
}

// dy (d(qkv), d(up), dlogits) and x were stored rounded; dx goes to a norm's backward in fp32.
void Bf16Linears::column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                  const float* W_r, const LinearCall& c) {
  if (!native_) return inner_.column_backward(dx, dW_r, db_r, dy_r, x, W_r, c);
  native_backward(dx, dW_r, dy_r, x, W_r, c);
  observed_backward_bias(c, db_r, dy_r, c.n);
}

void Bf16Linears::row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                              const LinearCall& c) {
  if (native_)
    native_forward(y, x_r, W_r, b, c);
  else
    inner_.row_forward(y, x_r, W_r, b, c);
}

InFlight Bf16Linears::row_forward_start(float* y, const float* x_r, const float* W_r, const float* b,
                                        const LinearCall& c, int slot) {
  if (native_) {  // one rank: nothing to leave in flight
    native_forward(y, x_r, W_r, b, c);
    return nullptr;
  }
  return inner_.row_forward_start(y, x_r, W_r, b, c, slot);
}

InFlight Bf16Linears::column_backward_start(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                            const float* x, const float* W_r, const LinearCall& c, int slot) {
  if (native_) {
    column_backward(dx, dW_r, db_r, dy_r, x, W_r, c);
    return nullptr;
  }
  return inner_.column_backward_start(dx, dW_r, db_r, dy_r, x, W_r, c, slot);
}

// dy is the fp32 residual gradient: the GEMMs read it rounded, the bias gradient sums it as it is (the
// column sums of the rows this rank holds, as the inner linears would); dx is stored in bf16. The native
// path narrows dy with the same rounding.
void Bf16Linears::row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                               const float* W_r, const LinearCall& c) {
  const int64_t rows = inner_.rows(c.n);
  if (native_) {
    native_backward(dx_r, dW_r, dy, x_r, W_r, c);
    observed_backward_bias(c, db, dy, rows);
    round_bf16_rows(dx_r, c.n, c.in);
    return;
  }
  inner_.row_backward(dx_r, dW_r, nullptr, rounded_dy(dy, rows, c.out), x_r, W_r, c);
  observed_backward_bias(c, db, dy, rows);
  round_bf16_rows(dx_r, c.n, c.in);
}

void Bf16Linears::column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                        const float* x, const float* W_r, const LinearCall& c,
                                        DeferredWeightGrads& later) {
  inner_.column_backward_input(dx, dW_r, db_r, dy_r, x, W_r, c, later);
}

// The deferred weight GEMM would read the rounded dy after this call's copy is reused.
void Bf16Linears::row_backward_input(float*, float*, float*, const float*, const float*, const float*,
                                     const LinearCall&, DeferredWeightGrads&) {
  fail("train.precision = bf16 does not run parallel.pp_schedule = zb1 yet");
}

}  // namespace odyssey
