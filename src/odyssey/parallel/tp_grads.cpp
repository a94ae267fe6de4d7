#include "odyssey/parallel/tp_grads.h"

#include <algorithm>

#include "odyssey/parallel/pipeline_grads.h"

namespace odyssey {

TpGradients TpGradients::plan(const ParamTable& table, Communicator& tp, Communicator* kv,
                              bool sequence_parallel) {
  TpGradients g = plan(table, tp.size(), tp.rank(), sequence_parallel);
  g.tp = &tp;
  g.kv = kv;
  return g;
}

TpGradients TpGradients::plan(const ParamTable& table, int t, int r, bool sequence_parallel) {
  TpGradients g;
  if (t == 1) return g;
  for (const ParamInfo& p : table.tensors()) {
    const Range dense{p.offset, p.offset + p.numel};
    if (p.tp.dim < 0) {  // replicated on every tp rank
      if (sequence_parallel) g.over_tp.push_back(dense);
      if (r != 0) g.norm_skip.push_back(dense);
    } else if (p.tp.kv && t > p.tp.heads) {  // one kv head on t / heads ranks
      g.over_kv.push_back(dense);
      if (r % (t / p.tp.heads) != 0) g.norm_skip.push_back(dense);
    }
  }
  return g;
}

void TpGradients::sum(ZeroEngine& engine) const {
  if (!tp) return;
  if (!over_tp.empty()) sum_gradient_ranges(engine, over_tp, *tp, HeldRuns::same, scratch);
  if (!over_kv.empty()) sum_gradient_ranges(engine, over_kv, *kv, HeldRuns::same, scratch);
}

uint64_t TpGradients::scratch_floats(const std::vector<Range>& runs) const {
  uint64_t most = 0;
  for (const std::vector<Range>* ranges : {&over_tp, &over_kv})
    for (uint64_t n : gradient_sum_messages(runs, *ranges, HeldRuns::same)) most = std::max(most, n);
  return most;
}

int kv_group_color(int K, int t, int r, int tp_group) {
  if (t <= K) return -1;
  return tp_group * K + r / (t / K);
}

}  // namespace odyssey
