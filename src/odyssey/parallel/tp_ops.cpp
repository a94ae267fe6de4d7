#include "odyssey/parallel/tp_ops.h"

#include <algorithm>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

int64_t slice_rows(const Communicator& tp, int64_t n) {
  ODY_CHECK(n % tp.size() == 0, "tensor parallelism: {} tokens do not split over tp = {}", n, tp.size());
  return n / tp.size();
}

int64_t slice_cols(const Communicator& tp, int64_t X) {
  ODY_CHECK(X % tp.size() == 0, "tensor parallelism: {} columns do not split over tp = {}", X, tp.size());
  return X / tp.size();
}

}  // namespace

void tp_all_reduce(Communicator& tp, float* x, int64_t count) {
  if (tp.size() > 1) tp.all_reduce(x, size_t(count), DType::f32);
}

void tp_gather_tokens(Communicator& tp, const float* slice, float* full, int64_t n, int64_t X) {
  const int64_t rows = slice_rows(tp, n);
  if (tp.size() == 1) {
    std::copy_n(slice, n * X, full);
    return;
  }
  tp.all_gather(slice, full, size_t(rows * X), DType::f32);  // token slices are rank-major already
}

void tp_reduce_scatter_tokens(Communicator& tp, const float* full, float* slice, int64_t n, int64_t X) {
  const int64_t rows = slice_rows(tp, n);
  if (tp.size() == 1) {
    std::copy_n(full, n * X, slice);
    return;
  }
  tp.reduce_scatter(full, slice, size_t(rows * X), DType::f32);
}

void tp_scatter_tokens(Communicator& tp, const float* full, float* slice, int64_t n, int64_t X) {
  const int64_t rows = slice_rows(tp, n);
  std::copy_n(full + tp.rank() * rows * X, rows * X, slice);
}

void tp_gather_cols(Communicator& tp, const float* x_r, float* x, float* staging, int64_t n, int64_t X) {
  const int64_t w = slice_cols(tp, X), t = tp.size();
  if (t == 1) {
    std::copy_n(x_r, n * X, x);
    return;
  }
  tp.all_gather(x_r, staging, size_t(n * w), DType::f32);  // staging [t][n, w]
  for (int64_t r = 0; r < t; ++r)
    for (int64_t i = 0; i < n; ++i) std::copy_n(staging + (r * n + i) * w, w, x + i * X + r * w);
}

void tp_keep_cols(Communicator& tp, const float* dx, float* dx_r, int64_t n, int64_t X) {
  const int64_t w = slice_cols(tp, X), c0 = tp.rank() * w;
  for (int64_t i = 0; i < n; ++i) std::copy_n(dx + i * X + c0, w, dx_r + i * w);
}

}  // namespace odyssey
