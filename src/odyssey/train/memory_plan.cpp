#include "odyssey/train/memory_plan.h"

#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/train/footprint.h"

namespace odyssey {

CheckpointPolicy resolve_checkpoint(const RunConfig& config,
                                    const std::function<HostMemoryNeed(CheckpointPolicy)>& need_for,
                                    const std::function<bool(const HostMemoryNeed&)>& fits,
                                    HostMemoryNeed* need, std::string* note) {
  if (config.memory.checkpoint != CheckpointPolicy::automatic) {
    *need = need_for(config.memory.checkpoint);
    return config.memory.checkpoint;
  }
  std::string tried;
  CheckpointPolicy chosen = CheckpointPolicy::none;
  for (CheckpointPolicy policy : auto_checkpoint_candidates(config)) {
    *need = need_for(policy);
    chosen = policy;
    tried +=
        fmt::format("{}{} {}", tried.empty() ? "" : ", ", need->checkpoint, size(need->activations_per_rank));
    if (fits(*need)) break;
  }
  *note = fmt::format(
      "memory.checkpoint = auto: {} (activations per rank: {}; the first that fits, in order of speed)",
      need->checkpoint, tried);
  return chosen;
}

HostMemoryNeed plan_memory(Layout& layout, uint64_t host_available, bool dry_run, std::string* auto_note) {
  const RunConfig& config = layout.config;
  const TrainConfig& tc = config.train;
  HostMemoryNeed need;
  if (tc.steps == 0 && !dry_run) return need;
  // This rank's need under a policy: the footprint (train/footprint.h, kept by the layout for the live
  // report), nothing read from the built objects.
  auto need_for = [&](CheckpointPolicy policy) {
    const RankFootprint& f = layout.footprint(policy);
    HostMemoryNeed n;
    n.state_per_rank = f.state.total() + f.comm_buffers;
    n.activations_per_rank = f.activations;
    n.offload_per_rank = f.offload;
    n.tokens_per_rank = config.seq_len() / layout.grid.sp().size();
    n.tier = enum_name(kMemoryTierNames, config.memory.tier);
    n.ranks_on_host = host_layout(layout.world).local_size;
    n.seq_len = config.seq_len();
    n.micro_batch = tc.micro_batch;
    n.checkpoint = enum_name(kCheckpointPolicyNames, policy);
    return n;
  };
  const CheckpointPolicy chosen = resolve_checkpoint(
      config, need_for,
      [&](const HostMemoryNeed& n) { return fits_host_memory(n, tc.host_memory_gb, host_available); }, &need,
      auto_note);
  if (config.memory.checkpoint == CheckpointPolicy::automatic) layout.set_memory_policy(chosen);  // once
  check_host_memory(need, tc.host_memory_gb, host_available);
  if (need.offload_per_rank > 0)
    check_offload_disk(need, config.memory.disk_budget_gb, config.memory.offload_dir,
                       offload_dir_free_bytes(config.memory.offload_dir));
  return need;
}

}  // namespace odyssey
