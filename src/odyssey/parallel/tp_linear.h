// Megatron's column- and row-parallel linears over a tensor-parallel group
// (tensor-pipeline-parallelism.md §1.2, §1.3, §1.7), with and without Megatron sequence parallelism
// (TP-SP). Weights in the nn.Linear layout [out, in]; each rank holds its shard contiguously.
//
// A column-parallel linear splits the output features, a row-parallel one the input features; a
// column-parallel linear followed by a row-parallel one (attention: qkv then o_proj; the MLP: fc then
// fc_proj) communicates only at the two ends:
//   plain TP: x [n, C] replicated -> column (no comm) -> local [n, O/t] -> row: all-reduce -> [n, C]
//   TP-SP:    x slice [n/t, C] -> column: all-gather -> [n, O/t] -> row: reduce-scatter -> [n/t, C]
// Backward runs the adjoints; backward's dx collective is started before the weight-gradient GEMM so
// the two overlap.
#pragma once

#include <cstdint>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"

namespace odyssey {

// Sizes of one TP linear: n tokens of the tp group (n % t == 0 under TP-SP), global in and out features.
struct TpLinearDims {
  int64_t n = 0;
  int in = 0, out = 0;
  bool sequence_parallel = false;
};

// Reused buffers of the TP linears (n * max(in, out) floats each at most): the gathered input or
// output gradient, the partial sums before their reduction, and a reduce-scatter's result.
struct TpLinearScratch {
  FloatBuffer full, partial, reduced;
};

// Column-parallel: W_r [out/t, in], b_r [out/t] (or null) are this rank's output features.
// x: plain, the full input [n, in] (replicated); TP-SP, this rank's token slice [n/t, in].
// y_r [n, out/t] = x_full W_r^T + b_r.
void column_linear_forward(Communicator& tp, float* y_r, const float* x, const float* W_r, const float* b_r,
                           const TpLinearDims& d, TpLinearScratch& s);
// dx (x's layout) += the adjoint of the input's collective applied to dy_r W_r; dW_r += dy_r^T x_full;
// db_r += column sums of dy_r (db_r may be null). TP-SP gathers x again (not kept from forward).
void column_linear_backward(Communicator& tp, float* dx, float* dW_r, float* db_r, const float* dy_r,
                            const float* x, const float* W_r, const TpLinearDims& d, TpLinearScratch& s);

// Row-parallel: W_r [out, in/t] holds this rank's input features; x_r [n, in/t]. The bias b [out] is
// replicated and added once, after the reduction (adding it before would add it t times).
// y: plain [n, out] (all-reduce); TP-SP this rank's token slice [n/t, out] (reduce-scatter).
void row_linear_forward(Communicator& tp, float* y, const float* x_r, const float* W_r, const float* b,
                        const TpLinearDims& d, TpLinearScratch& s);
// dy in y's layout. dx_r [n, in/t] += dy_full W_r; dW_r += dy_full^T x_r; db += column sums of dy as
// this rank holds it: plain, the whole dy (identical on every rank, no tp sum); TP-SP, its token slice
// (a partial sum: the step sums it over tp once, with the norm weights).
void row_linear_backward(Communicator& tp, float* dx_r, float* dW_r, float* db, const float* dy,
                         const float* x_r, const float* W_r, const TpLinearDims& d, TpLinearScratch& s);

}  // namespace odyssey
