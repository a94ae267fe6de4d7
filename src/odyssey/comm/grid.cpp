#include "odyssey/comm/grid.h"

#include <fmt/format.h>

#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"

namespace odyssey {

namespace {

constexpr int kDims = 5;  // tp, sp_ulysses, sp_ring, dp, pp: innermost first

std::array<int, kDims> extents(const GridDims& d) {
  return {d.tp, d.sp_ulysses, d.sp_ring, d.dp, d.pp};
}
std::array<int, kDims> as_array(const GridCoords& c) {
  return {c.tp, c.sp_ulysses, c.sp_ring, c.dp, c.pp};
}

}  // namespace

std::array<bool, kDims> grid_group_spans(GridGroup g) {
  switch (g) {
    case GridGroup::tp:
      return {true, false, false, false, false};
    case GridGroup::sp_ulysses:
      return {false, true, false, false, false};
    case GridGroup::sp_ring:
      return {false, false, true, false, false};
    case GridGroup::sp:
      return {false, true, true, false, false};
    case GridGroup::dp:
      return {false, false, false, true, false};
    case GridGroup::dp_sp:
      return {false, true, true, true, false};
    case GridGroup::pp:
      return {false, false, false, false, true};
    default:
      return {true, true, true, true, true};
  }
}

const char* grid_group_name(GridGroup g) {
  switch (g) {
    case GridGroup::world:
      return "world";
    case GridGroup::tp:
      return "tp";
    case GridGroup::sp_ulysses:
      return "sp_ulysses";
    case GridGroup::sp_ring:
      return "sp_ring";
    case GridGroup::sp:
      return "sp";
    case GridGroup::dp:
      return "dp";
    case GridGroup::dp_sp:
      return "dp_sp";
    case GridGroup::pp:
      return "pp";
    case GridGroup::intra_node:
      return "intra_node";
    case GridGroup::inter_node:
      return "inter_node";
  }
  return "unknown";
}

GridDims ProcessGrid::validate(const GridDims& dims, int world_size) {
  GridDims d = dims;
  const std::pair<const char*, int> keys[] = {{"parallel.tp", d.tp},
                                              {"parallel.sp_ulysses", d.sp_ulysses},
                                              {"parallel.sp_ring", d.sp_ring},
                                              {"parallel.pp", d.pp}};
  for (const auto& [key, value] : keys) ODY_CHECK(value >= 1, "{} must be at least 1, got {}", key, value);
  const int others = d.tp * d.sp_ulysses * d.sp_ring * d.pp;
  const std::string product =
      fmt::format("parallel.tp ({}) x parallel.sp_ulysses ({}) x parallel.sp_ring ({}) x parallel.pp ({})",
                  d.tp, d.sp_ulysses, d.sp_ring, d.pp);
  if (d.dp == 0) {
    ODY_CHECK(world_size % others == 0,
              "cannot derive parallel.dp: {} = {} does not divide the world size {}", product, others,
              world_size);
    d.dp = world_size / others;
  }
  ODY_CHECK(d.dp >= 1, "parallel.dp must be at least 1 (or 0 to derive it), got {}", d.dp);
  ODY_CHECK(static_cast<long>(others) * d.dp == world_size,
            "parallel.dp ({}) x {} = {}, but the world size is {}: the degrees must multiply to the number "
            "of ranks",
            d.dp, product, static_cast<long>(others) * d.dp, world_size);
  ODY_CHECK(d.ranks_per_node >= 0,
            "parallel.ranks_per_node must be positive (or 0 for the real hosts), got {}", d.ranks_per_node);
  ODY_CHECK(d.ranks_per_node == 0 || world_size % d.ranks_per_node == 0,
            "parallel.ranks_per_node ({}) does not divide the world size {}", d.ranks_per_node, world_size);
  return d;
}

GridCoords ProcessGrid::coords_of(const GridDims& dims, int rank) {
  const auto e = extents(dims);
  std::array<int, kDims> c{};
  for (int i = 0; i < kDims; ++i) {
    c[i] = rank % e[i];
    rank /= e[i];
  }
  return {c[0], c[1], c[2], c[3], c[4]};
}

int ProcessGrid::rank_of(const GridDims& dims, const GridCoords& coords) {
  const auto e = extents(dims);
  const auto c = as_array(coords);
  int rank = 0;
  for (int i = kDims - 1; i >= 0; --i) rank = rank * e[i] + c[i];
  return rank;
}

ProcessGrid::ProcessGrid(Communicator& world, const GridDims& dims)
    : dims_(validate(dims, world.size())), rank_(world.rank()), size_(world.size()) {
  coords_ = coords_of(dims_, rank_);
  // Node of every rank: emulated blocks, or the hosts MPI reports.
  std::vector<int> node_of(size_), local_of(size_);
  if (dims_.ranks_per_node > 0) {
    for (int q = 0; q < size_; ++q) {
      node_of[q] = q / dims_.ranks_per_node;
      local_of[q] = q % dims_.ranks_per_node;
    }
    num_nodes_ = size_ / dims_.ranks_per_node;
  } else {
    const HostLayout host = host_layout(world);
    node_of = host.nodes;
    num_nodes_ = host.num_nodes;
    std::vector<int> seen(num_nodes_, 0);
    for (int q = 0; q < size_; ++q) local_of[q] = seen[node_of[q]]++;
  }
  node_ = node_of[rank_];
  local_rank_ = local_of[rank_];

  const auto mine = as_array(coords_);
  for (int gi = 0; gi < kNumGridGroups; ++gi) {
    const auto g = static_cast<GridGroup>(gi);
    std::vector<int>& m = members_[gi];
    for (int q = 0; q < size_; ++q) {
      bool same = true;
      if (g == GridGroup::intra_node) {
        same = node_of[q] == node_;
      } else if (g == GridGroup::inter_node) {
        same = local_of[q] == local_rank_;
      } else {
        const auto c = as_array(coords_of(dims_, q));
        const auto span = grid_group_spans(g);
        for (int i = 0; i < kDims; ++i) same = same && (span[i] || c[i] == mine[i]);
      }
      if (same) m.push_back(q);
    }
    bool one_node = true;
    for (int q : m) one_node = one_node && node_of[q] == node_;
    // The lowest member names the group; world rank order is the group order (innermost first).
    groups_[gi] = world.split(m.front(), rank_, grid_group_name(g), one_node);
    ODY_CHECK(groups_[gi] && groups_[gi]->size() == static_cast<int>(m.size()),
              "process grid: group {} has {} ranks, expected {}", grid_group_name(g),
              groups_[gi] ? groups_[gi]->size() : 0, m.size());
  }
}

std::string ProcessGrid::describe() const {
  std::string out = fmt::format(
      "grid: {} ranks = tp {} x sp_ulysses {} x sp_ring {} x dp {} x pp {}; {} node(s){}\n", size_, dims_.tp,
      dims_.sp_ulysses, dims_.sp_ring, dims_.dp, dims_.pp, num_nodes_,
      emulated_nodes() ? fmt::format(" of {} ranks (emulated)", dims_.ranks_per_node) : std::string());
  out += fmt::format("rank {}: tp {} sp_ulysses {} sp_ring {} dp {} pp {}, node {} local rank {}\n", rank_,
                     coords_.tp, coords_.sp_ulysses, coords_.sp_ring, coords_.dp, coords_.pp, node_,
                     local_rank_);
  for (int gi = 0; gi < kNumGridGroups; ++gi) {
    const Communicator& c = *groups_[gi];
    out += fmt::format("  {:<10} size {:>3}  rank {:>3}  {}  members [{}]\n", c.name(), c.size(), c.rank(),
                       c.intra_node() ? "intra" : "inter", fmt::join(members_[gi], ","));
  }
  return out;
}

NodeSplit split_nodes(Communicator& comm, int D) {
  ODY_CHECK(D >= 1 && comm.size() % D == 0, "{} ranks of {} do not split into nodes of {}", comm.size(),
            comm.name(), D);
  const int r = comm.rank(), N = comm.size() / D;
  NodeSplit s;
  s.intra = comm.split(r / D, r, comm.name() + "_intra", true);
  s.inter = comm.split(r % D, r, comm.name() + "_inter", N == 1);
  return s;
}

}  // namespace odyssey
