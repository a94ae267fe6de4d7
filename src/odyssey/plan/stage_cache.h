// The stages the planner sizes (tables, unit schedules), built once per (model, layer range, tp piece):
// a search evaluates thousands of layouts of one model, and building a ParamTable dominated its time.
#pragma once

#include "odyssey/model/stage.h"

namespace odyssey {

// Built without storage (Architecture::make_stage); valid until the process ends.
Stage& planned_stage(const ModelConfig& model, const StageRange& range, const TpPiece& tp);

}  // namespace odyssey
