#include "odyssey/train/memory_check.h"

#include "odyssey/core/error.h"

namespace odyssey {

std::string size(uint64_t bytes) {
  const double gib = double(bytes) / double(uint64_t{1} << 30);
  return gib >= 1 ? fmt::format("{:.2f} GiB", gib) : fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}

bool fits_host_memory(const HostMemoryNeed& need, double budget_gb, uint64_t available_bytes) {
  const uint64_t ranks = uint64_t(need.ranks_on_host);
  if (budget_gb > 0)
    return (need.activations_per_rank + need.state_per_rank) * ranks <=
           uint64_t(budget_gb * double(uint64_t{1} << 30));
  return available_bytes == 0 || need.activations_per_rank * ranks <= available_bytes;
}

void check_host_memory(const HostMemoryNeed& need, double budget_gb, uint64_t available_bytes) {
  const uint64_t ranks = uint64_t(need.ranks_on_host);
  const uint64_t activations = need.activations_per_rank * ranks;
  uint64_t wanted = activations, limit = available_bytes;
  std::string what;
  if (budget_gb > 0) {
    wanted += need.state_per_rank * ranks;
    limit = uint64_t(budget_gb * double(uint64_t{1} << 30));
    what = fmt::format("train.host_memory_gb = {}", budget_gb);
  } else {
    if (available_bytes == 0) return;  // unknown: nothing to check against
    what = "available (MemAvailable in /proc/meminfo; train.host_memory_gb sets a budget instead)";
  }
  if (wanted <= limit) return;
  fail(
      "train.seq_len {} x train.micro_batch {} does not fit on this host: {} rank(s) x {} of "
      "activations ({} tokens per rank, memory.checkpoint = {}){} = {}, but {} is {}. Use more "
      "sequence-parallel ranks (parallel.sp_ulysses, parallel.sp_ring), memory.checkpoint = "
      "keep_attention or full, a shorter train.seq_len or a smaller train.micro_batch",
      need.seq_len, need.micro_batch, ranks, size(need.activations_per_rank), need.tokens_per_rank,
      need.checkpoint,
      budget_gb > 0 ? fmt::format(" + {} of model state per rank", size(need.state_per_rank)) : "",
      size(wanted), size(limit), what);
}

}  // namespace odyssey
