// `odyssey plan --search` (planner.md §8): enumerates the layouts of a world on a cluster — factorizations
// into dp x tp x pp x sp_ulysses x sp_ring, ZeRO stages, micro-batches, checkpoint policies, quantized
// communication — lets the engine's own validation refuse what it would refuse (its message is the
// reason), discards what does not fit, ranks the rest by predicted tokens/s, and says why the winner wins.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/plan/cluster.h"
#include "odyssey/train/config.h"

namespace odyssey {

struct SearchOptions {
  int top = 10;
  int world = 0;  // 0: every device of the cluster
  bool allow_tp_across_nodes = false;
  int max_tp = 0, max_pp = 0, max_sp = 0;  // 0: no limit
  std::vector<int> zero_stages = {0, 1, 2, 3};
  std::vector<std::string> checkpoints = {"none", "keep_attention", "full"};
  bool comm_options = true;   // also the SDP4Bit and ZeRO++ bundles
  int max_micro_batches = 4;  // micro-batch sizes tried per dp (the smallest divisors first)
};

// "search.key=value" (keys as the fields above; lists comma-separated). Unknown keys are errors.
void apply_search_setting(SearchOptions& o, const std::string& setting);

// {"evaluated", "valid", "fits", "seconds", "top": [plans...], "pareto": [...], "rejected": {reason: count},
//  "rejected_examples": [...], "winner_vs_neighbours": [...]}
nlohmann::json search_layouts(const RunConfig& base, const Cluster& cluster, const SearchOptions& options);
std::string search_table(const nlohmann::json& result);

}  // namespace odyssey
