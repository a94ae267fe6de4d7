#include "odyssey/plan/layout.h"

#include <algorithm>
#include <array>

#include "odyssey/core/error.h"
#include "odyssey/parallel/sequence_shard.h"

namespace odyssey {

namespace {

std::array<int, 5> as_array(const GridCoords& c) {
  return {c.tp, c.sp_ulysses, c.sp_ring, c.dp, c.pp};
}

}  // namespace

int PlanGroup::rank_of(int world_rank) const {
  auto it = std::find(members.begin(), members.end(), world_rank);
  ODY_CHECK(it != members.end(), "plan: rank {} is not in group {}", world_rank, name);
  return int(it - members.begin());
}

PlanLayout::PlanLayout(const RunConfig& config, int world_size, int ranks_per_node) : config_(config) {
  ODY_CHECK(world_size >= 1, "plan: the world must have at least one rank, got {}", world_size);
  // The planner reads no data: a config without data.train is planned as if it named some.
  if (config_.data.train.empty()) config_.data.train = "(planned)";
  // The engine's validation with the precision it runs today; the plan keeps the one asked for.
  precision_ = config_.train.precision;
  config_.train.precision = Precision::fp32;
  config_.validate(world_size);
  config_.train.precision = precision_;
  const ParallelConfig& p = config_.parallel;
  dims_ = ProcessGrid::validate(GridDims{p.tp, p.sp_ulysses, p.sp_ring, p.dp, p.pp, p.ranks_per_node},
                                world_size);
  config_.parallel.dp = dims_.dp;
  world_ = world_size;
  ranks_per_node_ = p.ranks_per_node > 0 ? p.ranks_per_node
                    : ranks_per_node > 0 ? ranks_per_node
                                         : world_size;
  ranks_per_node_ = std::min(ranks_per_node_, world_size);
  ODY_CHECK(world_size % ranks_per_node_ == 0, "plan: {} ranks do not split into nodes of {} ranks",
            world_size, ranks_per_node_);
  const TrainConfig& t = config_.train;
  ODY_CHECK(t.global_batch % (t.micro_batch * dims_.dp) == 0,
            "train.global_batch ({}) must be a multiple of train.micro_batch ({}) x dp ({})", t.global_batch,
            t.micro_batch, dims_.dp);
  micro_steps_ = t.global_batch / (t.micro_batch * dims_.dp);
  SequenceShard shard{p.sp_ulysses, p.sp_ring, 0, 0, p.sp_ring_layout};
  check_sequence_shard(config_.seq_len(), shard);
}

bool PlanLayout::one_node(const std::vector<int>& members) const {
  for (int q : members)
    if (node_of(q) != node_of(members.front())) return false;
  return true;
}

int PlanLayout::nodes_of(const std::vector<int>& members) const {
  std::vector<int> nodes;
  for (int q : members) nodes.push_back(node_of(q));
  std::sort(nodes.begin(), nodes.end());
  return int(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

PlanGroup PlanLayout::group(GridGroup g, int rank) const {
  PlanGroup out;
  out.name = grid_group_name(g);
  if (g == GridGroup::intra_node || g == GridGroup::inter_node || g == GridGroup::world) {
    for (int q = 0; q < world_; ++q)
      if (g == GridGroup::world ||
          (g == GridGroup::intra_node ? node_of(q) == node_of(rank)
                                      : q % ranks_per_node_ == rank % ranks_per_node_))
        out.members.push_back(q);
  } else {
    // The ranks that vary the spanned dimensions with the others at mine, in world rank order (the
    // outermost dimension, pp, most significant: rank = tp + TP (ulysses + U (ring + R (dp + DP pp)))).
    const auto span = grid_group_spans(g);
    const std::array<int, 5> extent = {dims_.tp, dims_.sp_ulysses, dims_.sp_ring, dims_.dp, dims_.pp};
    std::array<int, 5> c = as_array(coords(rank));
    std::array<int, 5> first = c;
    for (int i = 0; i < 5; ++i)
      if (span[i]) first[i] = 0;
    c = first;
    while (true) {
      int q = 0;
      for (int i = 4; i >= 0; --i) q = q * extent[size_t(i)] + c[size_t(i)];
      out.members.push_back(q);
      int i = 0;  // the next coordinates: the innermost spanned dimension counts fastest
      for (; i < 5; ++i) {
        if (!span[size_t(i)]) continue;
        if (++c[size_t(i)] < extent[size_t(i)]) break;
        c[size_t(i)] = 0;
      }
      if (i == 5) break;
    }
  }
  out.intra = one_node(out.members);
  out.nodes = nodes_of(out.members);
  return out;
}

PlanGroup PlanLayout::subgroup(const std::string& name, std::vector<int> members, bool intra_flag) const {
  const int nodes = nodes_of(members);
  return PlanGroup{name, std::move(members), intra_flag, nodes};
}

}  // namespace odyssey
