// One layout's plan (planner.md §12): bytes (accounting and crossing), time, the inputs' provenance and,
// on request, the collective schedule; as JSON and as a readable table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "odyssey/plan/cluster.h"
#include "odyssey/plan/layout.h"
#include "odyssey/plan/time_model.h"

namespace odyssey {

// The world a config describes on a cluster: the product of its degrees when parallel.dp is set, else
// every device of the cluster.
int plan_world(const RunConfig& config, const Cluster& cluster);

// The plan of every distinct rank kind (one per pipeline stage), reporting the slowest; schedule: include
// rank 0's records. Bytes are the engine's exactly where byte_model_gap() is empty, else the spec's
// closed forms for what it names ("bytes_exact", "bytes_note").
nlohmann::json plan_layout(const PlanLayout& layout, const Cluster& cluster, bool schedule = false);

// The step time of the slowest distinct rank (one per pipeline stage): what plan_layout reports, without
// the rest of the plan (the search ranks thousands of layouts by it).
StepTime slowest_step(const PlanLayout& layout, const Cluster& cluster);

// The plan as a few aligned lines for a terminal.
std::string plan_table(const nlohmann::json& plan);

}  // namespace odyssey
