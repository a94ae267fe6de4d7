// The planner's memory model (planner.md §4): bytes per rank in the engine's MemoryReport categories.
// One function, so that it can be the engine's footprint function (DESIGN.md "one footprint function",
// train/footprint.h) once that lands; until then it sizes what the engine's sizing code exposes without
// allocating (the Partition's padded shards, the stage's activation_bytes_for) and says so (`exact`).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "odyssey/plan/cluster.h"
#include "odyssey/plan/layout.h"

namespace odyssey {

struct PlanMemory {
  uint64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  bool exact = false;  // the engine's own footprint function produced it
  uint64_t total() const { return params + grads + optimizer + activations + comm_buffers; }
  nlohmann::json to_json() const;
};

PlanMemory plan_memory(const PlanLayout& layout, int rank);

// The device limit of §4.3: memory_gib x 2^30 x (1 - memory_reserve); 0 when the cluster declares none.
uint64_t memory_limit(const Cluster& cluster);

}  // namespace odyssey
