#include "odyssey/plan/plan_command.h"

#include <fstream>
#include <iostream>

#include "odyssey/core/error.h"
#include "odyssey/plan/calibrate.h"
#include "odyssey/plan/check.h"
#include "odyssey/plan/cluster.h"
#include "odyssey/plan/plan.h"
#include "odyssey/plan/search.h"

namespace odyssey {

int run_plan(const PlanCommand& cmd) {
  ODY_CHECK(!cmd.config.empty(), "odyssey plan: --config is required");
  ODY_CHECK(!cmd.cluster.empty(),
            "odyssey plan: --cluster is required (a file of configs/clusters/, or one "
            "written by --calibrate)");
  const RunConfig config = load_run_config(cmd.config, cmd.overrides);
  const Cluster cluster = load_cluster(cmd.cluster);
  if (cmd.search) {
    SearchOptions so;
    so.top = cmd.top;
    so.world = cmd.world;
    for (const std::string& s : cmd.search_sets) apply_search_setting(so, s);
    const nlohmann::json result = search_layouts(config, cluster, so);
    if (cmd.json)
      std::cout << result.dump(2) << std::endl;
    else
      std::cout << search_table(result);
    return 0;
  }
  const int world = cmd.world > 0 ? cmd.world : plan_world(config, cluster);
  const PlanLayout layout(config, world, cluster.devices_per_node);
  const nlohmann::json plan = plan_layout(layout, cluster, cmd.schedule);
  if (cmd.json)
    std::cout << plan.dump(2) << std::endl;
  else
    std::cout << plan_table(plan);
  return 0;
}

int run_plan_collective(const PlanCommand& cmd, Communicator& world) {
  if (cmd.calibrate) {
    ODY_CHECK(!cmd.output.empty(), "odyssey plan --calibrate: --output FILE is required");
    RunConfig config;
    if (!cmd.config.empty()) config = load_run_config(cmd.config, cmd.overrides);
    const Cluster c = calibrate_host(config, world, cmd.ranks_per_node);
    if (world.rank() == 0) {
      const std::string tmp = cmd.output + ".tmp";
      {
        std::ofstream out(tmp);
        ODY_CHECK(out.good(), "cannot write {}", tmp);
        out << "# Written by `odyssey plan --calibrate` (planner.md §7): every entry measured on this host\n"
               "# unless [sources] says otherwise.\n"
            << cluster_to_toml(c);
      }
      parse_cluster(cluster_to_toml(c), cmd.output);  // what was written reads back
      std::rename(tmp.c_str(), cmd.output.c_str());
      std::cout << "wrote " << cmd.output << std::endl;
    }
    return 0;
  }
  ODY_CHECK(!cmd.config.empty(), "odyssey plan --check: --config is required");
  const RunConfig config = load_run_config(cmd.config, cmd.overrides);
  const nlohmann::json report = check_layout(config, world);
  int32_t mismatches = int32_t(report["mismatches"].size());
  for (const auto& m : report["mismatches"])
    std::cerr << "rank " << world.rank() << ": " << m.get<std::string>() << "\n";
  world.all_reduce(&mismatches, 1, DType::i32);
  if (world.rank() == 0) {
    nlohmann::json out = {{"check", mismatches == 0 ? "equal" : "different"},
                          {"ranks", world.size()},
                          {"mismatches", mismatches},
                          {"rank0", report}};
    std::cout << (cmd.json ? out.dump(2) : out.dump()) << std::endl;
  }
  return mismatches == 0 ? 0 : 1;
}

}  // namespace odyssey
