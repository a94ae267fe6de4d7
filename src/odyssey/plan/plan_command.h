// The `odyssey plan` subcommand (planner.md §2) behind the app's option parsing.
#pragma once

#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"

namespace odyssey {

struct PlanCommand {
  std::string config;                  // run.toml
  std::vector<std::string> overrides;  // --set section.key=value
  std::string cluster;                 // cluster.toml
  int world = 0;                       // ranks (0: the config's degrees, or every device of the cluster)
  bool json = false;                   // JSON instead of the table
  bool schedule = false;               // include the collective schedule
  bool search = false;
  int top = 10;
  std::vector<std::string> search_sets;  // --search-set search.key=value
  bool check = false;                    // under mpirun: run the layout and compare
  bool calibrate = false;                // under mpirun: measure this host
  std::string output;                    // --calibrate: the cluster file to write
  int ranks_per_node = 0;
};

// Predict / search (no MPI). Returns the exit code.
int run_plan(const PlanCommand& cmd);
// --check and --calibrate: collective over world. Returns the exit code (1 on a mismatch).
int run_plan_collective(const PlanCommand& cmd, Communicator& world);

}  // namespace odyssey
