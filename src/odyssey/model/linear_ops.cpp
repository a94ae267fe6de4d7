#include "odyssey/model/linear_ops.h"

#include <string>

#include "odyssey/kernels/linear.h"
#include "odyssey/model/deferred_weight_grads.h"

namespace odyssey {

namespace {

double flops(const LinearCall& c) {
  return 2.0 * double(c.n) * c.in * c.out;
}

// f observed as "<kind><tag>"; the name is built only when there is an observer (never in a plain step).
template <typename F>
void observed_gemm(const LinearCall& c, const char* kind, F&& f) {
  if (!c.observer) return f();
  observed(c.observer, (std::string(kind) + c.tag).c_str(), flops(c), f);
}

}  // namespace

void observed_forward(const LinearCall& c, float* out, const float* inp, const float* weight,
                      const float* bias) {
  observed_gemm(c, "gemm.fwd.",
                [&] { linear_forward(out, inp, weight, bias, int(c.n), c.in, c.out, c.ld_out); });
}

void observed_backward_input(const LinearCall& c, float* dinp, const float* dout, const float* weight) {
  observed_gemm(c, "gemm.dinp.",
                [&] { linear_backward_input(dinp, dout, weight, int(c.n), c.in, c.out, c.ld_out); });
}

void observed_backward_weight(const LinearCall& c, float* dweight, const float* dout, const float* inp) {
  observed_gemm(c, "gemm.dweight.",
                [&] { linear_backward_weight(dweight, dout, inp, int(c.n), c.in, c.out, c.ld_out); });
}

void observed_backward_bias(const LinearCall& c, float* dbias, const float* dout, int64_t rows) {
  if (!dbias) return;
  observed(c.observer, "bias_grad.colsum", 0,
           [&] { linear_backward_bias(dbias, dout, int(rows), c.out, c.ld_out); });
}

void LocalLinears::column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                                  const LinearCall& c) {
  observed_forward(c, y_r, x, W_r, b_r);
}

void LocalLinears::column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                   const float* W_r, const LinearCall& c) {
  observed_backward_input(c, dx, dy_r, W_r);
  observed_backward_weight(c, dW_r, dy_r, x);
  observed_backward_bias(c, db_r, dy_r, c.n);
}

void LocalLinears::row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                               const LinearCall& c) {
  observed_forward(c, y, x_r, W_r, b);
}

void LocalLinears::row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                                const float* W_r, const LinearCall& c) {
  column_backward(dx_r, dW_r, db, dy, x_r, W_r, c);  // one rank: the same linear
}

void LocalLinears::column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                         const float* x, const float* W_r, const LinearCall& c,
                                         DeferredWeightGrads& later) {
  observed_backward_input(c, dx, dy_r, W_r);
  later.record(dW_r, dy_r, x, c);  // instead of observed_backward_weight
  observed_backward_bias(c, db_r, dy_r, c.n);
}

void LocalLinears::row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                                      const float* W_r, const LinearCall& c, DeferredWeightGrads& later) {
  column_backward_input(dx_r, dW_r, db, dy, x_r, W_r, c, later);  // one rank: the same linear
}

LinearOps& local_linears() {
  static LocalLinears local;
  return local;
}

}  // namespace odyssey
