#include "odyssey/parallel/tp_linear.h"

#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/linear.h"
#include "odyssey/parallel/tp_ops.h"

namespace odyssey {

namespace {

// Exactly n floats of b, zeroed.
float* zeroed(FloatBuffer& b, int64_t n) {
  if (b.size() < size_t(n)) b.resize(size_t(n));
  std::memset(b.data(), 0, size_t(n) * sizeof(float));
  return b.data();
}

float* sized(FloatBuffer& b, int64_t n) {
  if (b.size() < size_t(n)) b.resize(size_t(n));
  return b.data();
}

int shard(const Communicator& tp, int features, const char* what) {
  ODY_CHECK(features % tp.size() == 0, "tensor parallelism: {} {} features do not split over tp = {}",
            features, what, tp.size());
  return features / tp.size();
}

// rows of y [rows, cols] += b [cols]
void add_bias(float* y, const float* b, int64_t rows, int cols) {
  for (int64_t i = 0; i < rows; ++i) accumulate(y + i * cols, b, size_t(cols));
}

}  // namespace

void column_linear_forward(Communicator& tp, float* y_r, const float* x, const float* W_r, const float* b_r,
                           const TpLinearDims& d, TpLinearScratch& s) {
  const int out_r = shard(tp, d.out, "output");
  const float* x_full = x;
  if (d.sequence_parallel) {
    float* g = sized(s.full, d.n * d.in);
    tp_gather_tokens(tp, x, g, d.n, d.in);
    x_full = g;
  }
  linear_forward(y_r, x_full, W_r, b_r, int(d.n), d.in, out_r);
}

void column_linear_backward(Communicator& tp, float* dx, float* dW_r, float* db_r, const float* dy_r,
                            const float* x, const float* W_r, const TpLinearDims& d, TpLinearScratch& s) {
  const int out_r = shard(tp, d.out, "output");
  const int N = int(d.n);
  const float* x_full = x;
  if (d.sequence_parallel) {  // re-gather the input (Megatron's default: the gathered copy is not kept)
    float* g = sized(s.full, d.n * d.in);
    tp_gather_tokens(tp, x, g, d.n, d.in);
    x_full = g;
  }
  // dx_partial [n, in]: this rank's output features' share of dx, reduced over tp (plain: all-reduce
  // to the full dx; TP-SP: reduce-scatter to this rank's slice) while the weight gradient is computed.
  float* dxp = zeroed(s.partial, d.n * d.in);
  linear_backward_input(dxp, dy_r, W_r, N, d.in, out_r);
  const int64_t t = tp.size(), count = d.sequence_parallel ? d.n / t * d.in : d.n * d.in;
  float* reduced = dxp;
  RequestPtr pending;
  if (t > 1 && d.sequence_parallel) {
    reduced = sized(s.reduced, count);
    pending = tp.reduce_scatter_async(dxp, reduced, size_t(count), DType::f32);
  } else if (t > 1) {
    pending = tp.all_reduce_async(dxp, size_t(count), DType::f32);
  }
  linear_backward_weight(dW_r, dy_r, x_full, N, d.in, out_r);
  if (db_r) linear_backward_bias(db_r, dy_r, N, out_r);
  if (pending) pending->wait();
  accumulate(dx, reduced, size_t(count));
}

void row_linear_forward(Communicator& tp, float* y, const float* x_r, const float* W_r, const float* b,
                        const TpLinearDims& d, TpLinearScratch& s) {
  const int in_r = shard(tp, d.in, "input");
  const int64_t rows = d.sequence_parallel ? d.n / tp.size() : d.n;
  if (d.sequence_parallel) {
    float* p = sized(s.partial, d.n * d.out);
    linear_forward(p, x_r, W_r, nullptr, int(d.n), in_r, d.out);
    tp_reduce_scatter_tokens(tp, p, y, d.n, d.out);
  } else {
    linear_forward(y, x_r, W_r, nullptr, int(d.n), in_r, d.out);
    tp_all_reduce(tp, y, d.n * d.out);
  }
  if (b) add_bias(y, b, rows, d.out);
}

void row_linear_backward(Communicator& tp, float* dx_r, float* dW_r, float* db, const float* dy,
                         const float* x_r, const float* W_r, const TpLinearDims& d, TpLinearScratch& s) {
  const int in_r = shard(tp, d.in, "input");
  const int64_t rows = d.sequence_parallel ? d.n / tp.size() : d.n;
  if (db) linear_backward_bias(db, dy, int(rows), d.out);  // before the gather: never counted t times
  const float* dy_full = dy;
  if (d.sequence_parallel) {
    float* g = sized(s.full, d.n * d.out);
    tp_gather_tokens(tp, dy, g, d.n, d.out);
    dy_full = g;
  }
  linear_backward_input(dx_r, dy_full, W_r, int(d.n), in_r, d.out);
  linear_backward_weight(dW_r, dy_full, x_r, int(d.n), in_r, d.out);
}

}  // namespace odyssey
