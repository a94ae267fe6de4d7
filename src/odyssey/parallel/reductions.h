// The scalar reductions of a training step, written once: the token-mean loss and the global gradient
// norm. Both are sums of per-rank partials that every rank must get bit for bit the same, independent
// of the MPI library's reduction algorithm: the partials are gathered and added in rank order, in
// double. Each takes a list of (partials, group), so a parallelism adds its group to the list (tensor
// parallelism: its sharded tensors' squares over tp; pipeline parallelism: the last stage's loss over
// pp) without touching the others.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "odyssey/comm/communicator.h"

namespace odyssey {

// Σ over the group's ranks of each rank's values[i], added in rank order; values is overwritten with
// the sums (the same doubles on every rank).
void sum_in_rank_order(Communicator& group, std::span<double> values);

// A rank's share of the loss: the sum of its token losses and the tokens counted.
struct LossSum {
  double sum = 0;
  int64_t count = 0;
};
// The token mean over a group whose ranks hold disjoint tokens (dp x sp); with `across` (the pipeline
// group, where only the last stage holds losses) the sums are then added over it too.
double global_mean_loss(Communicator& group, const LossSum& local, Communicator* across = nullptr);

// A part of the gradients: grads is this rank's partial of the part over group (a shard), or with no
// group the whole part, held alike on every rank and counted once.
struct GradNormPart {
  std::span<const float> grads;
  Communicator* group = nullptr;
};
// sqrt(Σ over parts of the part's sum of squares), the same on every rank.
double global_grad_norm(const std::vector<GradNormPart>& parts);

}  // namespace odyssey
