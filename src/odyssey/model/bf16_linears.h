// The bf16 precision policy on the linear seam (mixed-precision.md §3, §4): the linears of a stage
// (local or tensor-parallel) with every GEMM operand a bf16 value and fp32 accumulation.
//
// The weights are the ZeRO engine's bf16 model copy (parallel/zero.h: the fp32 master rounded after each
// step); the activations are rounded where the policy stores them in bf16: a column linear's output (qkv,
// the MLP's up, the logits), the activations the block stores through store_activation (norm outputs,
// qkv after RoPE, attention output, MLP activation, d(qkv), d(up), dlogits) and a row linear's dx (d of
// the attention output, d of the MLP activation). A row linear's dy is the residual gradient, which stays
// fp32: its GEMMs read a rounded copy (the spec's "dres -> bf16" pass), its bias gradient sums the fp32
// values. Norms, softmax, the loss, the residual stream and every gradient buffer stay fp32.
//
// The GEMMs run in fp32 on the rounded values (the spec's §9 emulation, which a bf16 GEMM with fp32
// accumulation matches up to summation order; on a host without native bf16 GEMMs, kernels/gemm.h's
// fallback is exactly this fp32 GEMM of the widened operands). The activations a layer keeps for its
// backward are stored in 2 bytes (BlockActs' bf16 buffers, model/block.h) and widened exactly for the
// calls; the model copy is still fp32 values (parallel/zero.h).
#pragma once

#include "odyssey/core/buffer.h"
#include "odyssey/model/linear_ops.h"

namespace odyssey {

class Bf16Linears : public LinearOps {
 public:
  explicit Bf16Linears(LinearOps& inner) : inner_(inner) {}
  int tp() const override { return inner_.tp(); }
  int tp_rank() const override { return inner_.tp_rank(); }
  bool sequence_parallel() const override { return inner_.sequence_parallel(); }
  bool overlaps() const override { return inner_.overlaps(); }
  void store_activation(float* x, int64_t rows, int64_t cols, int64_t ld = 0) override;

  void column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                      const LinearCall& c) override;
  void column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                       const float* W_r, const LinearCall& c) override;
  void row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                   const LinearCall& c) override;
  void row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r, const float* W_r,
                    const LinearCall& c) override;
  // Domino's halves (model/domino.h): the inner linears' own, as row_forward and column_backward are.
  InFlight row_forward_start(float* y, const float* x_r, const float* W_r, const float* b,
                             const LinearCall& c, int slot) override;
  InFlight column_backward_start(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                 const float* W_r, const LinearCall& c, int slot) override;
  void column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                             const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override;
  void row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                          const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override;

  // The rounded copy of a row linear's dy (the largest: [rows(n), C] of one chunk).
  size_t bytes() const { return dy_.bytes(); }

 private:
  const float* rounded_dy(const float* dy, int64_t rows, int out);

  LinearOps& inner_;
  FloatBuffer dy_;
};

}  // namespace odyssey
