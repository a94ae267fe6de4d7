#include "odyssey/train/memory_plan.h"

#include <algorithm>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/model/deferred_weight_grads.h"

namespace odyssey {

HostMemoryNeed plan_memory(Layout& layout, uint64_t host_available, bool dry_run, std::string* auto_note) {
  const RunConfig& config = layout.config;
  const TrainConfig& tc = config.train;
  HostMemoryNeed need;
  if (tc.steps == 0 && !dry_run) return need;
  uint64_t state_bytes = layout.reduction_transient_bytes();
  for (auto& engine : layout.engines) {
    const MemoryReport state = engine->memory();
    state_bytes += state.params + state.grads + state.optimizer + state.comm_buffers;
  }
  // A pipeline rank holds the activations of its schedule's peak in-flight micro-batch stages (one
  // stage: one micro-batch).
  const int in_flight =
      validate_schedule(build_schedule(pipeline_schedule(config), layout.shape), layout.shape)
          .peak_in_flight[size_t(layout.grid.coords().pp)];
  const int seq_len = config.seq_len();
  const uint64_t gemm_scratch = gemm_scratch_bytes(std::max(config.model.d_model, config.model.ffn_dim()));
  auto need_for = [&](CheckpointPolicy policy) {
    HostMemoryNeed n;
    n.state_per_rank = state_bytes;
    n.tokens_per_rank = seq_len / layout.grid.sp().size();
    // zb1: a micro-batch between its I and W holds its weight GEMMs' operands instead of its
    // activations; the one being recorded holds both (parallel/pipeline.h).
    const bool zb1 = pipeline_schedule(config) == PipelineSchedule::zb1;
    size_t largest = 0, recorded = 0;
    uint64_t disk = 0;
    layout.set_memory_policy(policy);
    for (auto& stage : layout.stages) {
      largest = std::max(largest, stage->activation_bytes_for(tc.micro_batch, n.tokens_per_rank));
      if (zb1)
        recorded = std::max(
            recorded, deferred_weight_grad_bytes_for(*stage, int64_t(tc.micro_batch) * n.tokens_per_rank));
      disk += stage->offload_bytes_for(tc.micro_batch, n.tokens_per_rank);
    }
    n.activations_per_rank = std::max(largest, recorded) * size_t(in_flight) + recorded + gemm_scratch;
    if (layout.tp_overlap) {  // Domino's second reduction in flight: its partial sums (and TP-SP slice)
      const TpSplit split{layout.grid.tp().size(), config.parallel.tp_sp, true};
      const int64_t half = int64_t(config.layer_chunk_rows()) * (split.sequence_parallel ? split.t : 1);
      n.activations_per_rank += TensorParallelLinears::overlap_bytes_for(half, config.model.d_model, split);
    }
    n.offload_per_rank = disk * uint64_t(in_flight);
    n.tier = enum_name(kMemoryTierNames, config.memory.tier);
    n.ranks_on_host = host_layout(layout.world).local_size;
    n.seq_len = seq_len;
    n.micro_batch = tc.micro_batch;
    n.checkpoint = enum_name(kCheckpointPolicyNames, policy);
    return n;
  };
  if (config.memory.checkpoint != CheckpointPolicy::automatic) {
    need = need_for(config.memory.checkpoint);
  } else {
    std::string tried;
    // The disk tier holds what keep_attention and full keep: auto chooses between those two.
    std::vector<CheckpointPolicy> policies = {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                              CheckpointPolicy::keep_attention, CheckpointPolicy::full};
    if (config.memory.tier == MemoryTier::disk) policies.erase(policies.begin(), policies.begin() + 2);
    // Domino keeps both halves' token-local activations: the policies that keep them.
    if (config.parallel.tp_overlap == TpOverlap::domino) policies.resize(2);
    for (CheckpointPolicy policy : policies) {
      need = need_for(policy);
      const bool fits = fits_host_memory(need, tc.host_memory_gb, host_available);
      tried +=
          fmt::format("{}{} {}", tried.empty() ? "" : ", ", need.checkpoint, size(need.activations_per_rank));
      if (fits) break;
    }
    *auto_note = fmt::format(
        "memory.checkpoint = auto: {} (activations per rank: {}; the first that fits, in order of speed)",
        need.checkpoint, tried);
  }
  check_host_memory(need, tc.host_memory_gb, host_available);
  if (need.offload_per_rank > 0)
    check_offload_disk(need, config.memory.disk_budget_gb, config.memory.offload_dir,
                       offload_dir_free_bytes(config.memory.offload_dir));
  return need;
}

}  // namespace odyssey
