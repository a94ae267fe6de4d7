// The planner's memory model (planner.md §4): bytes per rank in the engine's MemoryReport categories.
// The model state (parameters, gradients, optimizer moments) is the engine's own footprint function
// (train/footprint.h, engine_state_bytes over this rank's stage tables): equal to what the ZeRO engines
// allocate by construction (`state_exact`). Activations and communication buffers are the footprint's too
// (rank_footprint under the run's memory.checkpoint; auto: its fastest candidate): `exact`, as the
// footprint is.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "odyssey/plan/cluster.h"
#include "odyssey/plan/layout.h"
#include "odyssey/train/footprint.h"

namespace odyssey {

struct PlanMemory {
  uint64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  bool state_exact = false;  // params, grads, optimizer from the engine's footprint function
  bool exact = false;        // every field from it
  uint64_t total() const { return params + grads + optimizer + activations + comm_buffers; }
  nlohmann::json to_json() const;
};

PlanMemory plan_memory(const PlanLayout& layout, int rank);

// The model state of world rank `rank`: engine_state_bytes (train/footprint.h) summed over its stages.
StateBytes planned_state_bytes(const PlanLayout& layout, int rank);

// What a rank holds beyond its model state while a step runs: its micro-batches' activations (with the
// GEMM scratch) and the communication buffers in flight (gathered units, pooled buckets).
struct PlanBuffers {
  uint64_t activations = 0, comm_buffers = 0;
};
PlanBuffers activation_and_buffer_bytes(const PlanLayout& layout, int rank);
// The memory.checkpoint policy the plan sizes (auto: the fastest the engine tries).
CheckpointPolicy planned_policy(const RunConfig& config);

// The device limit of §4.3: memory_gib x 2^30 x (1 - memory_reserve); 0 when the cluster declares none.
uint64_t memory_limit(const Cluster& cluster);

}  // namespace odyssey
