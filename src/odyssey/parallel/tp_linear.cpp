#include "odyssey/parallel/tp_linear.h"

#include <functional>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/model/deferred_weight_grads.h"
#include "odyssey/parallel/tp_ops.h"

namespace odyssey {

namespace {

// rows of y [rows, cols] += b [cols]
void add_bias(float* y, const float* b, int64_t rows, int cols) {
  for (int64_t i = 0; i < rows; ++i) accumulate(y + i * cols, b, size_t(cols));
}

// A call's reduction in flight (null: already done) and what completes the call after it.
class Pending : public LinearInFlight {
 public:
  Pending(RequestPtr request, OpObserver* observer, std::function<void()> then)
      : request_(std::move(request)), observer_(observer), then_(std::move(then)) {}
  void finish() override {
    if (request_) observed(observer_, "comm.tp.wait", 0, [&] { request_->wait(); });
    then_();
  }

 private:
  RequestPtr request_;
  OpObserver* observer_;
  std::function<void()> then_;
};

}  // namespace

size_t TensorParallelLinears::overlap_bytes_for(int64_t n, int width, const TpSplit& split) {
  if (!split.overlap || !split.sequence_parallel) return 0;  // plain TP reduces in the caller's buffers
  return size_t(n) * size_t(width) * sizeof(float);
}

size_t TensorParallelLinears::bytes_for(int64_t n, int width, const TpSplit& split) {
  if (split.t == 1 || !split.sequence_parallel) return 0;  // plain TP gathers nothing, reduces in place
  return 2 * size_t(n) * size_t(width) * sizeof(float);
}

const float* TensorParallelLinears::gathered(const float* x, int64_t n, int X, const LinearCall& c) {
  if (!sequence_parallel_) return x;
  float* g = full_.at_least(size_t(n * X));
  observed(c.observer, "comm.tp.all_gather", 0, [&] { tp_gather_tokens(tp_, x, g, n, X); });
  return g;
}

void TensorParallelLinears::column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                                           const LinearCall& c) {
  observed_forward(c, y_r, gathered(x, c.n, c.in, c), W_r, b_r);
}

void TensorParallelLinears::column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                            const float* x, const float* W_r, const LinearCall& c) {
  InFlight f = column_backward_split(dx, dW_r, db_r, dy_r, x, W_r, c, nullptr, 0);
  finish(f);
}

InFlight TensorParallelLinears::column_backward_start(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                                      const float* x, const float* W_r, const LinearCall& c,
                                                      int slot) {
  return column_backward_split(dx, dW_r, db_r, dy_r, x, W_r, c, nullptr, slot);
}

void TensorParallelLinears::column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                                  const float* x, const float* W_r, const LinearCall& c,
                                                  DeferredWeightGrads& later) {
  InFlight f = column_backward_split(dx, dW_r, db_r, dy_r, x, W_r, c, &later, 0);
  finish(f);
}

InFlight TensorParallelLinears::column_backward_split(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                                      const float* x, const float* W_r, const LinearCall& c,
                                                      DeferredWeightGrads* later, int slot) {
  const float* x_full = gathered(x, c.n, c.in, c);
  // This rank's output features' share of dx [n, in], reduced over tp while the weight gradient is
  // computed: plain, written into dx and all-reduced there; TP-SP, written into scratch and
  // reduce-scattered into dx, this rank's token slice [rows(n), in].
  const bool scatter = tp_.size() > 1 && sequence_parallel_;
  float* dxp = scatter ? partial_[slot].at_least(size_t(c.n * c.in)) : dx;
  observed_backward_input(c, dxp, dy_r, W_r);
  const int64_t count = rows(c.n) * c.in;
  RequestPtr pending;
  if (scatter)
    pending = overlap_ ? overlap_->reduce_scatter(dxp, dx, size_t(count))
                       : tp_.reduce_scatter_async(dxp, dx, size_t(count), DType::f32);
  else if (tp_.size() > 1)
    pending = overlap_ ? overlap_->all_reduce(dx, size_t(count))
                       : tp_.all_reduce_async(dx, size_t(count), DType::f32);
  // (Recorded: x_full is copied, the gather's scratch being reused.)
  if (later)
    later->record(dW_r, dy_r, x_full, c);
  else
    observed_backward_weight(c, dW_r, dy_r, x_full);
  observed_backward_bias(c, db_r, dy_r, c.n);
  return std::make_unique<Pending>(std::move(pending), c.observer, [] {});
}

void TensorParallelLinears::row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                                        const LinearCall& c) {
  InFlight f = row_forward_start(y, x_r, W_r, b, c, 0);
  finish(f);
}

InFlight TensorParallelLinears::row_forward_start(float* y, const float* x_r, const float* W_r,
                                                  const float* b, const LinearCall& c, int slot) {
  ODY_CHECK(c.ld_out == 0, "row linear {}: its output is reduced dense (ld_out is for column linears)",
            c.tag);
  RequestPtr pending;
  if (sequence_parallel_) {
    float* p = partial_[slot].at_least(size_t(c.n * c.out));
    observed_forward(c, p, x_r, W_r, nullptr);
    if (overlap_)
      pending = overlap_->reduce_scatter(p, y, size_t(rows(c.n) * c.out));
    else
      observed(c.observer, "comm.tp.reduce_scatter", 0,
               [&] { tp_reduce_scatter_tokens(tp_, p, y, c.n, c.out); });
  } else {
    observed_forward(c, y, x_r, W_r, nullptr);
    if (overlap_)
      pending = overlap_->all_reduce(y, size_t(c.n * c.out));
    else
      observed(c.observer, "comm.tp.all_reduce", 0, [&] { tp_all_reduce(tp_, y, c.n * c.out); });
  }
  // The bias after the reduction: before it, it would count t times.
  const int64_t n = rows(c.n);
  const int out = c.out;
  return std::make_unique<Pending>(std::move(pending), c.observer, [=] {
    if (b) add_bias(y, b, n, out);
  });
}

void TensorParallelLinears::row_backward(float* dx_r, float* dW_r, float* db, const float* dy,
                                         const float* x_r, const float* W_r, const LinearCall& c) {
  row_backward_split(dx_r, dW_r, db, dy, x_r, W_r, c, nullptr);
}

void TensorParallelLinears::row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy,
                                               const float* x_r, const float* W_r, const LinearCall& c,
                                               DeferredWeightGrads& later) {
  row_backward_split(dx_r, dW_r, db, dy, x_r, W_r, c, &later);
}

void TensorParallelLinears::row_backward_split(float* dx_r, float* dW_r, float* db, const float* dy,
                                               const float* x_r, const float* W_r, const LinearCall& c,
                                               DeferredWeightGrads* later) {
  ODY_CHECK(c.ld_out == 0,
            "row linear {}: its output gradient is gathered dense (ld_out is for column linears)", c.tag);
  observed_backward_bias(c, db, dy, rows(c.n));  // this rank's rows, before the gather
  const float* dy_full = gathered(dy, c.n, c.out, c);
  observed_backward_input(c, dx_r, dy_full, W_r);
  if (later)
    later->record(dW_r, dy_full, x_r, c);
  else
    observed_backward_weight(c, dW_r, dy_full, x_r);
}

}  // namespace odyssey
