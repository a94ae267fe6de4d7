// The process grid of DESIGN.md: world ranks laid out over (tp, sp_ulysses, sp_ring, dp, pp),
// innermost first, so
//   rank = tp + TP * (sp_ulysses + U * (sp_ring + R * (dp + DP * pp))).
// Tensor-parallel peers are neighbours (same node first), pipeline stages are farthest apart.
// Every named group is a Communicator split from the world; each knows whether its ranks share a
// node. Nodes are real hosts, or emulated as consecutive blocks of ranks_per_node ranks (to test
// the two-level paths on one host).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"

namespace odyssey {

struct GridDims {
  int tp = 1;
  int sp_ulysses = 1;
  int sp_ring = 1;
  int dp = 1;  // 0: derived as world size / (tp * sp_ulysses * sp_ring * pp)
  int pp = 1;
  int ranks_per_node = 0;  // 0: as MPI reports hosts; else node = rank / ranks_per_node
};

struct GridCoords {
  int tp = 0;
  int sp_ulysses = 0;
  int sp_ring = 0;
  int dp = 0;
  int pp = 0;
  bool operator==(const GridCoords&) const = default;
};

// The groups, by name: each is the ranks that share every coordinate outside its dimensions.
enum class GridGroup {
  world,
  tp,
  sp_ulysses,
  sp_ring,
  sp,  // sp_ulysses x sp_ring
  dp,
  dp_sp,  // dp x sp: reduces gradients of weights replicated over dp and sp
  pp,
  intra_node,  // the ranks on my node
  inter_node,  // the ranks with my local index, one per node
};
constexpr int kNumGridGroups = 10;
const char* grid_group_name(GridGroup g);
// The grid dimensions a group spans, innermost first (tp, sp_ulysses, sp_ring, dp, pp): its members share
// every coordinate outside them (intra_node, inter_node and world are not grid-shaped: all true).
std::array<bool, 5> grid_group_spans(GridGroup g);

class ProcessGrid {
 public:
  // Collective over world. Validates dims (errors name the parallel.* keys) and splits the groups.
  ProcessGrid(Communicator& world, const GridDims& dims);

  // The dims with dp derived, or an error naming the keys when they do not fit world_size ranks.
  // Usable before any communicator exists, so a bad layout is refused before any work.
  static GridDims validate(const GridDims& dims, int world_size);
  static GridCoords coords_of(const GridDims& dims, int rank);
  static int rank_of(const GridDims& dims, const GridCoords& c);

  const GridDims& dims() const { return dims_; }
  const GridCoords& coords() const { return coords_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int node() const { return node_; }
  int num_nodes() const { return num_nodes_; }
  int local_rank() const { return local_rank_; }
  bool emulated_nodes() const { return dims_.ranks_per_node > 0; }

  Communicator& group(GridGroup g) { return *groups_[static_cast<int>(g)]; }
  // World ranks of my group g, in group rank order.
  const std::vector<int>& members(GridGroup g) const { return members_[static_cast<int>(g)]; }

  Communicator& world() { return group(GridGroup::world); }
  Communicator& tp() { return group(GridGroup::tp); }
  Communicator& sp_ulysses() { return group(GridGroup::sp_ulysses); }
  Communicator& sp_ring() { return group(GridGroup::sp_ring); }
  Communicator& sp() { return group(GridGroup::sp); }
  Communicator& dp() { return group(GridGroup::dp); }
  Communicator& dp_sp() { return group(GridGroup::dp_sp); }
  Communicator& pp() { return group(GridGroup::pp); }
  Communicator& intra_node() { return group(GridGroup::intra_node); }
  Communicator& inter_node() { return group(GridGroup::inter_node); }

  // A header line and one line per group (name, size, my rank, level, members), for rank 0 to
  // print at start-up.
  std::string describe() const;

 private:
  GridDims dims_;
  GridCoords coords_;
  int rank_ = 0, size_ = 1, node_ = 0, num_nodes_ = 1, local_rank_ = 0;
  std::array<std::unique_ptr<Communicator>, kNumGridGroups> groups_;
  std::array<std::vector<int>, kNumGridGroups> members_;
};

// comm cut into nodes of D consecutive ranks (rank = node·D + local index): `intra` holds this rank's
// node, by local index; `inter` the ranks with this rank's local index, one per node. Collective.
struct NodeSplit {
  std::unique_ptr<Communicator> intra, inter;
};
NodeSplit split_nodes(Communicator& comm, int ranks_per_node);

}  // namespace odyssey
