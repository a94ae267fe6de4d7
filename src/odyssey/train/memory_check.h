// Before a run allocates its activations: will they fit on this host? A layout that cannot fit is
// refused with the numbers and what to change, instead of the kernel's out-of-memory killer ending
// one rank mid-step (or the host swapping to a halt).
//
// The check counts what the engine accounts for (model state already allocated, activations of one
// micro-batch of this rank's sequence shard), summed over the ranks on the host. Real use is higher
// (kernel workspaces: the attention kernel's, about 5 B T H D floats per rank, kept between calls up to
// 512 MiB, kernels/attention_workspace.h; MPI, the program itself; peak RSS runs ~5-30% above the
// accounted total in bench/long_sequences.sh), so a run that passes may still not fit; one that fails
// cannot.
#pragma once

#include <cstdint>
#include <string>

#include "odyssey/model/config.h"

namespace odyssey {

struct HostMemoryNeed {
  uint64_t state_per_rank = 0;        // parameters, gradients, optimizer state, comm buffers (allocated)
  uint64_t activations_per_rank = 0;  // one micro-batch on this rank's sequence shard (not yet allocated)
  int ranks_on_host = 1;
  int seq_len = 0, tokens_per_rank = 0, micro_batch = 0;  // for the message
  const char* checkpoint = "none";                        // the memory.checkpoint policy it was sized for
  const char* tier = "ram";                               // memory.tier
  uint64_t offload_per_rank = 0;  // the disk tier's scratch files of one rank (not yet allocated)
};

// "1.25 GiB", or "3.4 MiB" below a GiB.
std::string size(uint64_t bytes);

// True when check_host_memory would pass.
bool fits_host_memory(const HostMemoryNeed& need, double budget_gb, uint64_t available_bytes);

// The ranks' model state and activations must fit in train.host_memory_gb (budget_gb > 0) or, with no
// budget, in available_bytes: MemAvailable read before the ranks allocated their model state. (Read
// after it, it would not show most of the state: buffers of 64 MiB and more are mapped lazily and take
// memory when the first step writes them, core/buffer.h. Counting activations alone against it
// accepted GPT-2 124M at 32K tokens on 2 and 4 Ulysses ranks of a 23 GiB host, which the kernel's
// out-of-memory killer then ended mid-step.) available_bytes == 0 (unknown) skips the check. Throws
// odyssey::Error naming the keys.
void check_host_memory(const HostMemoryNeed& need, double budget_gb, uint64_t available_bytes);

// Free space of `dir` in bytes for an unprivileged writer; fails naming memory.offload_dir when the
// directory cannot be read or written.
uint64_t offload_dir_free_bytes(const std::string& dir);

// The disk tier's scratch files of the ranks on this host must fit in memory.disk_budget_gb (when > 0)
// and in the free space of memory.offload_dir less 10%; otherwise throws odyssey::Error naming the keys.
// A RAM tier (offload_per_rank 0) passes.
void check_offload_disk(const HostMemoryNeed& need, double disk_budget_gb, const std::string& dir,
                        uint64_t free_bytes);

// Before the model is allocated: the least model state a rank holds, fp32 weights, gradients and
// AdamW moments (16 bytes a parameter) with ZeRO's shards over `replicas` ranks (stage 1 shards
// the moments, 2 also the gradients, 3 also the weights).
uint64_t min_state_bytes_per_rank(int64_t parameters, int zero_stage, int replicas);

// A model whose state cannot fit (ranks_on_host x min_state_bytes_per_rank over the budget, or over
// available_bytes when budget_gb == 0) is refused naming the model's size keys and what to change,
// instead of failing inside the allocation (std::bad_alloc, or the out-of-memory killer).
// parameters_per_rank: what one rank holds before ZeRO (a pipeline rank: its stages; 0: the model).
void check_model_state(const ModelConfig& model, int zero_stage, int replicas, int ranks_on_host,
                       double budget_gb, uint64_t available_bytes, int64_t parameters_per_rank = 0);

}  // namespace odyssey
