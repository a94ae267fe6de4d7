// Domino's schedule inside a block (tensor-pipeline-parallelism.md §2): the block's row chunks (two
// halves of the residual rows under parallel.tp_overlap = domino) each run a chain of steps, step k of
// a chunk finishing the tensor-parallel collective its step k - 1 started (the linear seam's
// row_forward_start / column_backward_start, model/linear_ops.h). In order, every step of chunk 0 runs,
// then every step of chunk 1, ...: exactly the block's calls without Domino. Interleaved, the steps run
// as a wavefront (round i runs step k of the chunk i - k, k ascending), so one chunk's collective is
// in flight while the other chunk computes:
//
//   forward, after the attention (steps: start proj | finish proj, norm, MLP in, start MLP out |
//   finish MLP out):   s0(μ0) | s0(μ1) s1(μ0) | s1(μ1) s2(μ0) | s2(μ1)
//
// Collectives start in program order on every rank and are waited in that order too, as the
// communication thread (comm/comm_thread.h) runs them first in, first out. This is §2.2's schedule
// within a layer; the last collective of a layer is waited at its end (no cross-layer overlap).
#pragma once

namespace odyssey {

// step(j, k) for chunks j of `chunks` (order: 0 first, or with last_first the last first) and steps k
// of `steps`, in order or interleaved.
template <typename Step>
void chunk_pipeline(int chunks, int steps, bool interleave, bool last_first, Step&& step) {
  auto chunk = [&](int i) { return last_first ? chunks - 1 - i : i; };
  if (!interleave) {
    for (int i = 0; i < chunks; ++i)
      for (int k = 0; k < steps; ++k) step(chunk(i), k);
    return;
  }
  for (int round = 0; round < chunks + steps - 1; ++round)
    for (int k = 0; k < steps; ++k)
      if (round - k >= 0 && round - k < chunks) step(chunk(round - k), k);
}

}  // namespace odyssey
