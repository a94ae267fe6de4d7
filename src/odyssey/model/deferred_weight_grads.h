// The weight-gradient GEMMs of a backward, run later: the split backward of zero-bubble pipelines
// (tensor-pipeline-parallelism.md §3.2: I computes the input gradients now, W the weight gradients
// later, B = I ; W). A linear's backward in the I pass (LinearOps::*_backward_input) computes dx and
// the bias gradient and records its weight GEMM here with copies of the GEMM's operands (the input as
// the GEMM reads it and the output gradient), so the micro-batch's activations and the block's scratch
// can be reused before W runs. run() is the W pass: each dW += dy^T x in the order recorded, which is
// per weight the order a plain backward has, with the same kernel on the same values (bitwise the same
// gradients).
#pragma once

#include <cstddef>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/stage.h"

namespace odyssey {

class DeferredWeightGrads {
 public:
  // dW [out, in] += dy [n, out]^T x [n, in], later (n, in, out from c); dy and x are copied now.
  void record(float* dW, const float* dy, const float* x, const LinearCall& c);
  // Runs every recorded GEMM in order (observed as "gemm.dweight.<tag>"), then forgets them (the
  // operand buffers are kept for the next micro-batch).
  void run();
  bool empty() const { return gemms_.empty(); }
  size_t bytes() const { return bytes_; }  // operands held now

 private:
  struct Gemm {
    float* dW;
    LinearCall call;
  };
  std::vector<Gemm> gemms_;
  std::vector<FloatBuffer> operands_;  // dy, x of gemms_[i] at 2i, 2i + 1 (kept allocated for reuse)
  size_t bytes_ = 0;
};

// The linear seam of an I pass: forwards run as `inner`'s, backwards compute dx (and db) through
// `inner` and record the weight GEMMs in `later`.
class DeferringLinears : public LinearOps {
 public:
  DeferringLinears(LinearOps& inner, DeferredWeightGrads& later) : inner_(inner), later_(later) {}
  int tp() const override { return inner_.tp(); }
  int tp_rank() const override { return inner_.tp_rank(); }
  bool sequence_parallel() const override { return inner_.sequence_parallel(); }

  void column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                      const LinearCall& c) override {
    inner_.column_forward(y_r, x, W_r, b_r, c);
  }
  void column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                       const float* W_r, const LinearCall& c) override {
    inner_.column_backward_input(dx, dW_r, db_r, dy_r, x, W_r, c, later_);
  }
  void row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                   const LinearCall& c) override {
    inner_.row_forward(y, x_r, W_r, b, c);
  }
  void row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r, const float* W_r,
                    const LinearCall& c) override {
    inner_.row_backward_input(dx_r, dW_r, db, dy, x_r, W_r, c, later_);
  }
  void column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                             const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override {
    inner_.column_backward_input(dx, dW_r, db_r, dy_r, x, W_r, c, later);
  }
  void row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                          const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override {
    inner_.row_backward_input(dx_r, dW_r, db, dy, x_r, W_r, c, later);
  }

 private:
  LinearOps& inner_;
  DeferredWeightGrads& later_;
};

}  // namespace odyssey
