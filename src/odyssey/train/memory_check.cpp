#include "odyssey/train/memory_check.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/model/params.h"

namespace odyssey {

std::string size(uint64_t bytes) {
  const double gib = double(bytes) / double(uint64_t{1} << 30);
  return gib >= 1 ? fmt::format("{:.2f} GiB", gib) : fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}

namespace {

// What the ranks on this host need in all, and what they may use (0: unknown, nothing to check).
uint64_t wanted_bytes(const HostMemoryNeed& need) {
  return (need.activations_per_rank + need.state_per_rank) * uint64_t(need.ranks_on_host);
}
uint64_t limit_bytes(double budget_gb, uint64_t available_bytes) {
  return budget_gb > 0 ? uint64_t(budget_gb * double(uint64_t{1} << 30)) : available_bytes;
}

}  // namespace

bool fits_host_memory(const HostMemoryNeed& need, double budget_gb, uint64_t available_bytes) {
  const uint64_t limit = limit_bytes(budget_gb, available_bytes);
  return limit == 0 || wanted_bytes(need) <= limit;
}

void check_host_memory(const HostMemoryNeed& need, double budget_gb, uint64_t available_bytes) {
  const uint64_t ranks = uint64_t(need.ranks_on_host);
  const uint64_t wanted = wanted_bytes(need), limit = limit_bytes(budget_gb, available_bytes);
  if (limit == 0 || wanted <= limit) return;
  const std::string what =
      budget_gb > 0 ? fmt::format("train.host_memory_gb = {}", budget_gb)
                    : "available (MemAvailable in /proc/meminfo before the model state was allocated; "
                      "train.host_memory_gb sets a budget instead)";
  fail(
      "train.seq_len {} x train.micro_batch {} does not fit on this host: {} rank(s) x {} of "
      "activations ({} tokens per rank, memory.checkpoint = {}){} = {}, but {} is {}. Use more "
      "sequence-parallel ranks (parallel.sp_ulysses, parallel.sp_ring), memory.checkpoint = "
      "keep_attention or full, memory.tier = disk, a smaller memory.chunk_tokens, a shorter train.seq_len or "
      "a smaller "
      "train.micro_batch",
      need.seq_len, need.micro_batch, ranks, size(need.activations_per_rank), need.tokens_per_rank,
      need.checkpoint, fmt::format(" + {} of model state per rank", size(need.state_per_rank)), size(wanted),
      size(limit), what);
}

uint64_t offload_dir_free_bytes(const std::string& dir) {
  struct stat st {};
  ODY_CHECK(::stat(dir.c_str(), &st) == 0, "memory.offload_dir '{}' cannot be used: {}", dir,
            std::strerror(errno));
  ODY_CHECK(S_ISDIR(st.st_mode), "memory.offload_dir '{}' is not a directory", dir);
  struct statvfs fs {};
  ODY_CHECK(::statvfs(dir.c_str(), &fs) == 0, "memory.offload_dir '{}' cannot be used: {}", dir,
            std::strerror(errno));
  ODY_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0 && !(fs.f_flag & ST_RDONLY),
            "memory.offload_dir '{}' is not a writable directory", dir);
  return uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
}

void check_offload_disk(const HostMemoryNeed& need, double disk_budget_gb, const std::string& dir,
                        uint64_t free_bytes) {
  if (need.offload_per_rank == 0) return;
  const uint64_t wanted = need.offload_per_rank * uint64_t(need.ranks_on_host);
  const uint64_t usable = free_bytes / 10 * 9;  // a margin for everything else on that disk
  const uint64_t budget = uint64_t(disk_budget_gb * double(uint64_t{1} << 30));
  const bool over_budget = disk_budget_gb > 0 && wanted > budget;
  if (!over_budget && wanted <= usable) return;
  fail(
      "memory.tier = disk: {} rank(s) x {} of layer inputs on disk ({} tokens per rank, memory.checkpoint = "
      "{}) = {}, but {}. Free space in memory.offload_dir, choose a larger disk for it, raise "
      "memory.disk_budget_gb, or use more sequence-parallel ranks, a shorter train.seq_len or a smaller "
      "train.micro_batch",
      need.ranks_on_host, size(need.offload_per_rank), need.tokens_per_rank, need.checkpoint, size(wanted),
      over_budget ? fmt::format("memory.disk_budget_gb = {} allows {}", disk_budget_gb, size(budget))
                  : fmt::format("memory.offload_dir '{}' has {} free (90% usable: {})", dir, size(free_bytes),
                                size(usable)));
}

uint64_t min_state_bytes_per_rank(int64_t parameters, int zero_stage, int replicas) {
  const long double p = (long double)parameters, n = replicas;
  const long double weights = zero_stage >= 3 ? 4 * p / n : 4 * p;
  const long double grads = zero_stage >= 2 ? 4 * p / n : 4 * p;
  const long double moments = zero_stage >= 1 ? 8 * p / n : 8 * p;
  const long double total = weights + grads + moments;
  return total >= (long double)UINT64_MAX ? UINT64_MAX : uint64_t(total);
}

void check_model_state(const ModelConfig& model, int zero_stage, int replicas, int ranks_on_host,
                       double budget_gb, uint64_t available_bytes, int64_t parameters_per_rank) {
  const int64_t parameters = parameters_per_rank > 0 ? parameters_per_rank : model.num_parameters();
  const uint64_t per_rank = min_state_bytes_per_rank(parameters, zero_stage, replicas);
  const long double wanted = (long double)per_rank * ranks_on_host;
  uint64_t limit = available_bytes;
  std::string what = "available (MemAvailable in /proc/meminfo)";
  if (budget_gb > 0) {
    limit = uint64_t(budget_gb * double(uint64_t{1} << 30));
    what = fmt::format("train.host_memory_gb = {}", budget_gb);
  } else if (available_bytes == 0) {
    return;  // unknown: nothing to check against
  }
  if (wanted <= (long double)limit) return;
  fail(
      "the model (model.n_layer {}, model.d_model {}, model.vocab_size {}, model.seq_len {}: {} "
      "parameters per rank) does not fit on this host: {} rank(s) x at least {} of model state (fp32 "
      "weights, "
      "gradients, AdamW moments; parallel.zero_stage {} over {} rank(s)), but {} is {}. Use a smaller "
      "model, a higher parallel.zero_stage or more ranks",
      model.n_layer, model.d_model, model.vocab_size, model.seq_len, parameters, ranks_on_host,
      size(per_rank), zero_stage, replicas, size(limit), what);
}

}  // namespace odyssey
