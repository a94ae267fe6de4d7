// The start-up memory check of a built layout: what each rank needs (its model state, the activations
// of its pipeline's peak in-flight micro-batches under a memory.checkpoint policy, the disk tier's
// files), checked against the host before any activation is allocated. memory.checkpoint = auto picks
// the first policy that fits, in order of speed (none, cheap, keep_attention, full).
#pragma once

#include <cstdint>
#include <string>

#include "odyssey/train/layout_builder.h"
#include "odyssey/train/memory_check.h"

namespace odyssey {

// Sizes this rank's need under memory.checkpoint (auto: the first policy that fits host_available;
// *auto_note says which and why), sets that policy on the layout's stages, and refuses (throws
// odyssey::Error naming the keys) a need that does not fit the host or the disk. With train.steps = 0
// and no dry run nothing is sized.
HostMemoryNeed plan_memory(Layout& layout, uint64_t host_available, bool dry_run, std::string* auto_note);

}  // namespace odyssey
