// `odyssey plan --check` (planner.md §9.1, §9.2): runs the layout in the engine for two steps with the
// communication trace on and compares what each rank's second step measured (CommStats' totals and its
// call-by-call trace) with the plan, exactly.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/train/config.h"

namespace odyssey {

// Differences between a predicted and a measured `comm` object (CommStats::to_json's layout: totals,
// by_kind with calls and both levels, by_group with calls), one line each; empty when equal.
std::vector<std::string> compare_comm(const nlohmann::json& predicted, const nlohmann::json& measured);

// Differences between the planned records (a record's `repeat` identical calls each) and the engine's
// trace of the same step (CommStats' "trace": group, kind, level, count, dtype, bus bytes per call),
// compared as multisets: the first planned call the trace lacks, then the first traced call the plan
// lacks; empty when equal.
std::vector<std::string> compare_trace(const std::vector<CommRecord>& predicted, const nlohmann::json& trace);

// Collective over world. Trains `config` for two steps in a scratch run directory (rank 0 makes it and
// removes it), then every rank compares its second step with the plan for its rank. Returns this rank's
// report: {"rank", "predicted", "measured", "mismatches": [...]}.
nlohmann::json check_layout(const RunConfig& config, Communicator& world);

}  // namespace odyssey
