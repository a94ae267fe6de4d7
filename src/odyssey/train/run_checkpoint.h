// A run's checkpoints, one path for every layout: resume from the newest (any layout it was written
// under, read slice by slice, each engine taking what its ZeRO stage keeps) or initialise, and save
// (every rank its engines' slices in parallel, train/sharded_checkpoint.h).
#pragma once

#include <cstdint>
#include <string>

#include "odyssey/optim/schedule.h"
#include "odyssey/train/layout_builder.h"

namespace odyssey {

// Resumes from the newest checkpoint of checkpoint.dir (checkpoint.resume) or initialises what each
// engine keeps. Returns the step to start at. Refuses a checkpoint of another model or global batch.
int64_t resume_or_init(Layout& layout);

// Collective over the world: writes step's checkpoint (every stage its tensors, the tied copy once by
// the first stage, every tp rank its pieces) and returns its directory.
std::string save_run_checkpoint(Layout& layout, int64_t step, const LrSchedule& schedule);

}  // namespace odyssey
