// The start-up memory check of a built layout: what each rank needs (its footprint, train/footprint.h:
// model state, communication buffers, the activations of its pipeline's peak under a memory.checkpoint
// policy and the disk tier's files, all from the config), checked against the host before any
// activation is allocated. memory.checkpoint = auto picks the first policy that fits, in order of speed
// (none, cheap, keep_attention, full), from the footprint alone, then sets it on the stages once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "odyssey/train/layout_builder.h"
#include "odyssey/train/memory_check.h"

namespace odyssey {

// memory.checkpoint resolved: itself, or under auto the first of auto_checkpoint_candidates
// (train/footprint.h) whose need fits (the last when none does); *need is the chosen policy's need and
// *note (auto only) names the choice and each candidate's activations.
CheckpointPolicy resolve_checkpoint(const RunConfig& config,
                                    const std::function<HostMemoryNeed(CheckpointPolicy)>& need_for,
                                    const std::function<bool(const HostMemoryNeed&)>& fits,
                                    HostMemoryNeed* need, std::string* note);

// Sizes this rank's need under memory.checkpoint (auto: the first policy that fits host_available;
// *auto_note says which and why), sets that policy on the layout's stages, and refuses (throws
// odyssey::Error naming the keys) a need that does not fit the host or the disk. With train.steps = 0
// and no dry run nothing is sized.
HostMemoryNeed plan_memory(Layout& layout, uint64_t host_available, bool dry_run, std::string* auto_note);

}  // namespace odyssey
