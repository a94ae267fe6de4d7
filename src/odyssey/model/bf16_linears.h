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
// The GEMMs: with one tensor-parallel rank and ODYSSEY_BF16_GEMM = native (auto: where oneDNN creates
// bf16 matmuls, kernels/gemm.h), each call narrows its operands (bf16 values held in fp32: exact) into
// bf16 scratch and runs gemm_bf16 (fp32 accumulation, fp32 dst; the weight gradient accumulates into the
// fp32 gradient). Otherwise (emulate, AVX2 hosts, tensor-parallel linears) the inner fp32 GEMMs run on
// the rounded values: the spec's §9 emulation, which the bf16 GEMM matches up to summation order, and
// exactly kernels/gemm.h's fallback where there is no bf16 matmul. The activations a layer keeps for its
// backward are stored in 2 bytes (BlockActs' bf16 buffers, model/block.h) and widened exactly for the
// calls; the model copy is still fp32 values (parallel/zero.h), narrowed per call.
#pragma once

#include "odyssey/core/bf16.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/block.h"
#include "odyssey/model/linear_ops.h"

namespace odyssey {

// How the bf16 linears run their GEMMs: ODYSSEY_BF16_GEMM = emulate (fp32 GEMMs of the rounded values,
// the reference), native (gemm_bf16), auto or unset (native where gemm_bf16_native()). Read once; any
// other value is an error naming the variable.
enum class Bf16GemmMode { emulate, native };
Bf16GemmMode bf16_gemm_mode();

// The native path's bf16 scratch for a rank's linears of BlockDims d (tp = 1) over micro-batches of
// `tokens` rows, with the LM head's vocab_rows outputs (0: no head on this rank): the weight of the
// largest linear and one block of rows (kBf16GemmRows at most) of the widest input and output.
constexpr int64_t kBf16GemmRows = 512;
struct Bf16GemmScratch {
  size_t weight = 0, in = 0, out = 0;  // elements
  static Bf16GemmScratch of(const BlockDims& d, int64_t tokens, int64_t vocab_rows);
  size_t bytes() const { return (weight + in + out) * sizeof(bf16); }
};

class Bf16Linears : public LinearOps {
 public:
  // native: run gemm_bf16 where the inner linears are one rank's, in scratch reserved to `scratch`.
  Bf16Linears(LinearOps& inner, bool native = false, const Bf16GemmScratch& scratch = {});
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

  // Whether the GEMMs run gemm_bf16 (native) or the inner fp32 linears (emulation).
  bool native() const { return native_; }
  // The rounded copy of a row linear's dy (emulation; the largest: [rows(n), C] of one chunk).
  size_t bytes() const { return dy_.bytes(); }
  // The native path's bf16 scratch (Bf16GemmScratch::bytes of the reserved sizes, unless a call needed
  // more).
  size_t native_bytes() const { return w16_.bytes() + x16_.bytes() + dy16_.bytes(); }

 private:
  const float* rounded_dy(const float* dy, int64_t rows, int out);
  // The native GEMMs of one rank: y = x W^T + b; dx = dy W, dW += dy^T x (dy rows ld_dy apart).
  void native_forward(float* y, const float* x, const float* W, const float* b, const LinearCall& c);
  void native_backward(float* dx, float* dW, const float* dy, const float* x, const float* W,
                       const LinearCall& c);

  LinearOps& inner_;
  bool native_ = false;
  FloatBuffer dy_;
  AlignedBuffer<bf16> w16_, x16_, dy16_;
};

}  // namespace odyssey
