// A run's parallel layout as the planner sees it, without MPI: the grid of comm/grid.h over `world`
// ranks with nodes of `ranks_per_node` consecutive ranks, each rank's groups (members, whether they share
// a node) and the derived figures (data-parallel size, micro-steps per optimizer step). The engine's own
// validation (RunConfig::validate, ProcessGrid::validate) decides whether the layout is valid.
#pragma once

#include <string>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/train/config.h"

namespace odyssey {

// One communicator of a rank, as the engine would split it.
struct PlanGroup {
  std::string name;          // the engine's communicator name ("dp_sp", "sp_ulysses", ...)
  std::vector<int> members;  // world ranks, in group rank order
  bool intra = true;         // all members on one node (CommStats' level)
  int nodes = 1;             // nodes the members span
  int size() const { return int(members.size()); }
  int rank_of(int world_rank) const;
};

class PlanLayout {
 public:
  // Validates as the engine does (errors name the keys). ranks_per_node: parallel.ranks_per_node when
  // set, else this value (a cluster's devices per node, or the world for one host); 0: the world.
  PlanLayout(const RunConfig& config, int world_size, int ranks_per_node);

  const RunConfig& config() const { return config_; }
  // train.precision as the config asks: bf16 is planned by mixed-precision.md's policy (bf16 weights,
  // activations and their collectives, fp32 gradients) even while the engine refuses it.
  Precision precision() const { return precision_; }
  bool bf16() const { return precision_ == Precision::bf16; }
  const GridDims& dims() const { return dims_; }
  int world() const { return world_; }
  int ranks_per_node() const { return ranks_per_node_; }
  int nodes() const { return world_ / ranks_per_node_; }
  int node_of(int rank) const { return rank / ranks_per_node_; }
  // Micro-steps per optimizer step: global_batch / (micro_batch x dp).
  int micro_steps() const { return micro_steps_; }
  // Tokens of one row a rank holds: seq_len / (sp_ulysses x sp_ring).
  int local_tokens() const { return config_.seq_len() / (dims_.sp_ulysses * dims_.sp_ring); }
  GridCoords coords(int rank) const { return ProcessGrid::coords_of(dims_, rank); }

  // Rank's group g as the grid splits it (name, members, level).
  PlanGroup group(GridGroup g, int rank) const;
  // A group of the given members split from another (ZeRO's node split of its data-parallel group).
  PlanGroup subgroup(const std::string& name, std::vector<int> members, bool intra_flag) const;
  bool one_node(const std::vector<int>& members) const;
  int nodes_of(const std::vector<int>& members) const;

 private:
  RunConfig config_;
  GridDims dims_;
  Precision precision_ = Precision::fp32;
  int world_ = 1, ranks_per_node_ = 1, micro_steps_ = 1;
};

}  // namespace odyssey
