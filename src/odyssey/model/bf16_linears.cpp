#include "odyssey/model/bf16_linears.h"

#include "odyssey/core/error.h"
#include "odyssey/kernels/bf16_round.h"

namespace odyssey {

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
  inner_.column_forward(y_r, x, W_r, b_r, c);
  round_bf16_rows(y_r, c.n, c.out, c.ld_out);
}

// dy (d(qkv), d(up), dlogits) and x were stored rounded; dx goes to a norm's backward in fp32.
void Bf16Linears::column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                  const float* W_r, const LinearCall& c) {
  inner_.column_backward(dx, dW_r, db_r, dy_r, x, W_r, c);
}

void Bf16Linears::row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                              const LinearCall& c) {
  inner_.row_forward(y, x_r, W_r, b, c);
}

InFlight Bf16Linears::row_forward_start(float* y, const float* x_r, const float* W_r, const float* b,
                                        const LinearCall& c, int slot) {
  return inner_.row_forward_start(y, x_r, W_r, b, c, slot);
}

InFlight Bf16Linears::column_backward_start(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                            const float* x, const float* W_r, const LinearCall& c, int slot) {
  return inner_.column_backward_start(dx, dW_r, db_r, dy_r, x, W_r, c, slot);
}

// dy is the fp32 residual gradient: the GEMMs read it rounded, the bias gradient sums it as it is (the
// column sums of the rows this rank holds, as the inner linears would); dx is stored in bf16.
void Bf16Linears::row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                               const float* W_r, const LinearCall& c) {
  const int64_t rows = inner_.rows(c.n);
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
