// `odyssey plan --check` (planner.md §9.1, §9.2): runs the layout in the engine for two steps and compares
// what each rank's second step measured (CommStats, the MemoryReport) with the plan, exactly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/train/config.h"

namespace odyssey {

// Differences between a predicted and a measured `comm` object (CommStats::to_json's layout: totals,
// by_kind with calls and both levels, by_group with calls), one line each; empty when equal.
std::vector<std::string> compare_comm(const nlohmann::json& predicted, const nlohmann::json& measured);

// Collective over world. Trains `config` for two steps in a scratch run directory (rank 0 makes it and
// removes it), then every rank compares its second step with the plan for its rank. Returns this rank's
// report: {"rank", "predicted", "measured", "mismatches": [...]}.
nlohmann::json check_layout(const RunConfig& config, Communicator& world);

}  // namespace odyssey
