// Megatron's conjugate communication operators over a tensor-parallel group
// (tensor-pipeline-parallelism.md §1.1): each TP transition is a forward collective and its adjoint in
// backward. Every call is accounted by the communicator under the group it runs on ("tp").
//
//   operator              forward                             backward
//   copy_to (Megatron f)  identity                            all-reduce SUM
//   reduce_from (g)       all-reduce SUM                      identity
//   gather_tokens         all-gather token slices             reduce-scatter SUM
//   reduce_scatter_tokens reduce-scatter SUM                  all-gather
//   scatter_tokens        keep own token slice                all-gather
//   gather_cols           all-gather on the column axis       keep own column slice
//
// Token slices are contiguous row ranges of the flattened [n, X] token axis: rank r of t owns rows
// [r n/t, (r+1) n/t) (n % t == 0). Column slices: rank r owns columns [r X/t, (r+1) X/t).
// Only the non-identity halves are functions here; with t = 1 each is a copy or nothing.
#pragma once

#include <cstdint>

#include "odyssey/comm/communicator.h"

namespace odyssey {

// copy_to backward, reduce_from forward: x [count] summed over the group, in place.
void tp_all_reduce(Communicator& tp, float* x, int64_t count);

// gather_tokens forward, reduce_scatter_tokens backward, scatter_tokens backward:
// slice [n/t, X] -> full [n, X].
void tp_gather_tokens(Communicator& tp, const float* slice, float* full, int64_t n, int64_t X);

// gather_tokens backward, reduce_scatter_tokens forward: full [n, X] (partial sums) -> the sum's own
// slice [n/t, X].
void tp_reduce_scatter_tokens(Communicator& tp, const float* full, float* slice, int64_t n, int64_t X);

// scatter_tokens forward: own slice [n/t, X] of full [n, X] (no communication).
void tp_scatter_tokens(Communicator& tp, const float* full, float* slice, int64_t n, int64_t X);

// gather_cols forward: own columns x_r [n, X/t] -> x [n, X] (every rank's columns in rank order).
// staging: n X floats of scratch (the all-gather lands rank-major).
void tp_gather_cols(Communicator& tp, const float* x_r, float* x, float* staging, int64_t n, int64_t X);

// gather_cols backward: own columns dx_r [n, X/t] of dx [n, X].
void tp_keep_cols(Communicator& tp, const float* dx, float* dx_r, int64_t n, int64_t X);

}  // namespace odyssey
