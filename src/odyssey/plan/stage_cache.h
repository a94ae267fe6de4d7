// What the planner sizes from the engine's code, built once per distinct input and kept until the process
// ends: a search evaluates thousands of layouts of one model, and building ParamTables and Partitions
// dominated its time.
#pragma once

#include <cstdint>

#include "odyssey/model/stage.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/footprint.h"

namespace odyssey {

// Built without storage (Architecture::make_stage) per (model, layer range, tp piece).
Stage& planned_stage(const ModelConfig& model, const StageRange& range, const TpPiece& tp);

// The Partition a ZeRO engine over `ranks` replicas builds for a stage's table (parallel/zero.cpp: the
// buckets of bucket_bytes, or units when 0; a one-rank partition for stage 0), for replica `rank`.
// table: a planned_stage's (its address keys the cache).
const Partition& planned_partition(const ParamTable& table, int64_t bucket_bytes, int ranks, int rank,
                                   int64_t align);

// engine_state_bytes (train/footprint.h) for a planned_stage's table, memoized on the options it reads.
StateBytes planned_engine_state_bytes(const ParamTable& table, const ZeroOptions& options, int replicas,
                                      int rank, int optimizer_states);

}  // namespace odyssey
