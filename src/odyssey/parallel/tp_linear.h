// Megatron's column- and row-parallel linears over a tensor-parallel group (tensor-pipeline-
// parallelism.md §1.2, §1.3, §1.7): the block's linear seam (model/linear_ops.h) under tensor
// parallelism, with and without Megatron sequence parallelism (TP-SP). Weights in the nn.Linear
// layout [out, in]; each rank holds its shard contiguously.
//
// A column-parallel linear followed by a row-parallel one communicates only at the two ends:
//   plain TP: x [n, C] replicated -> column (no comm) -> local [n, O/t] -> row: all-reduce -> [n, C]
//   TP-SP:    x slice [n/t, C] -> column: all-gather -> [n, O/t] -> row: reduce-scatter -> [n/t, C]
// Backward runs the adjoints. The column backward's dx collective is started before the weight
// gradient GEMM so the two overlap; under TP-SP the column input is gathered again in backward
// (Megatron's default: the gathered copy is not kept).
//
// Domino (parallel.tp_overlap = domino, tensor-pipeline-parallelism.md §2): with a communication
// thread (comm/comm_thread.h, a duplicate of the tp group) every reduction of the row forward and of
// the column backward's dx runs there, so it progresses while the rank computes, and the blocks keep
// two chunks' reductions in flight (row_forward_start / column_backward_start, two scratch slots).
// The gathers stay on the tp communicator, blocking.
#pragma once

#include "odyssey/comm/comm_thread.h"
#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/linear_ops.h"

namespace odyssey {

class TensorParallelLinears : public LinearOps {
 public:
  // overlap: Domino's communication thread over a duplicate of tp (null: reductions on tp).
  TensorParallelLinears(Communicator& tp, bool sequence_parallel, CommThread* overlap = nullptr)
      : tp_(tp), sequence_parallel_(sequence_parallel), overlap_(overlap) {}

  int tp() const override { return tp_.size(); }
  int tp_rank() const override { return tp_.rank(); }
  bool sequence_parallel() const override { return sequence_parallel_; }
  bool overlaps() const override { return overlap_ != nullptr; }

  void column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                      const LinearCall& c) override;
  void column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                       const float* W_r, const LinearCall& c) override;
  void row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                   const LinearCall& c) override;
  void row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r, const float* W_r,
                    const LinearCall& c) override;
  // The zero-bubble split: the same communication now, the weight GEMM (local) recorded.
  void column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                             const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override;
  void row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                          const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override;
  InFlight row_forward_start(float* y, const float* x_r, const float* W_r, const float* b,
                             const LinearCall& c, int slot) override;
  InFlight column_backward_start(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                 const float* W_r, const LinearCall& c, int slot) override;

  // Scratch held between calls (under TP-SP: the gathered input or output gradient, and the partial
  // sums a reduce-scatter reads: n * max(in, out) floats each at most; Domino's second slot of the
  // partial sums). Plain TP reduces in place in the caller's output or dx.
  size_t bytes() const { return full_.bytes() + partial_[0].bytes() + partial_[1].bytes(); }
  // Of bytes(): Domino's second slot (overlap_bytes_for at its widest call).
  size_t overlap_bytes() const { return partial_[1].bytes(); }
  // What Domino's second slot adds for calls of n tokens of the group at most `width` features wide:
  // under TP-SP a partial sum [n, width]; plain TP, nothing.
  static size_t overlap_bytes_for(int64_t n, int width, const TpSplit& split);
  // What bytes() holds besides overlap_bytes() for calls of n tokens of the group at most `width`
  // features wide (the block's linears read and write d_model features at their group ends): under
  // TP-SP the gathered input or output gradient [n, width] and the first slot's partial sums [n, width].
  static size_t bytes_for(int64_t n, int width, const TpSplit& split);

 private:
  // x [rows(n), X] -> [n, X]: x itself, or under TP-SP the all-gather of the token slices into full_.
  const float* gathered(const float* x, int64_t n, int X, const LinearCall& c);
  // The backwards, the weight GEMM run now (later null) or recorded in *later; the column backward's
  // dx reduction left in flight in scratch slot `slot`.
  InFlight column_backward_split(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                 const float* W_r, const LinearCall& c, DeferredWeightGrads* later, int slot);
  void row_backward_split(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                          const float* W_r, const LinearCall& c, DeferredWeightGrads* later);

  Communicator& tp_;
  bool sequence_parallel_;
  CommThread* overlap_;
  FloatBuffer full_, partial_[2];
};

}  // namespace odyssey
