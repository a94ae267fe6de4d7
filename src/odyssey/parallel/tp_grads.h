// What tensor parallelism adds to a step's gradients after the data-parallel reductions
// (tensor-pipeline-parallelism.md §1.4, §1.7, §1.8), and what the gradient norm must leave out:
// - under Megatron sequence parallelism every replicated tensor (norms, the row-parallel linears'
//   biases, GPT-2's learned positions) computed a partial sum over this rank's tokens: it is summed over
//   the tp group;
// - a key/value head replicated over t / K ranks (GQA with tp > n_kv_head) got a partial gradient from
//   each rank's query heads: it is summed over the ranks holding it (the kv group);
// - the global norm counts each replicated tensor once: on tp rank 0 (a kv head: on the first of its
//   holders); the other ranks skip it.
#pragma once

#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/params.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/zero.h"

namespace odyssey {

struct TpGradients {
  Communicator* tp = nullptr;    // null: no tensor parallelism (nothing to do)
  Communicator* kv = nullptr;    // this rank's kv group (null when no kv head is replicated)
  std::vector<Range> over_tp;    // dense ranges of the table summed over tp
  std::vector<Range> over_kv;    // dense ranges summed over the kv group
  std::vector<Range> norm_skip;  // dense ranges this rank leaves out of the norm

  // The plan for a table cut by tensor_parallel(tp.size(), tp.rank()).
  static TpGradients plan(const ParamTable& table, Communicator& tp, Communicator* kv,
                          bool sequence_parallel);
  // Its ranges alone, for piece r of t (no communicator: the footprint and the byte model size them).
  static TpGradients plan(const ParamTable& table, int t, int r, bool sequence_parallel);
  // Sums the engine's reduced gradients of over_tp over tp and of over_kv over kv (collective).
  void sum(ZeroEngine& engine) const;
  // The floats scratch grows to when the engine holds the reduced gradients of `runs` (the largest
  // message of either sum; parallel/pipeline_grads.h).
  uint64_t scratch_floats(const std::vector<Range>& runs) const;

  mutable FloatBuffer scratch;  // the sums' packing space, kept from step to step
};

// The kv group's colour for the rank holding piece r of t (ranks sharing a replicated key/value head
// share it), or -1 when K heads split evenly over t (nothing is replicated). tp_group: an id of the
// rank's tp group, the same on all its members.
int kv_group_color(int K, int t, int r, int tp_group);

}  // namespace odyssey
