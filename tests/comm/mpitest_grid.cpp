// The process grid: coordinates and group membership for several layouts (most need 4 ranks and
// are skipped otherwise), node emulation with intra-/inter-node groups, and layout validation.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"

namespace odyssey {
namespace {

#define NEED_RANKS(n) \
  if (world().size() != (n)) GTEST_SKIP() << "needs " << (n) << " ranks"

using Members = std::vector<int>;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Each group's collectives reach exactly its members.
void expect_groups_work(ProcessGrid& grid) {
  for (int gi = 0; gi < kNumGridGroups; ++gi) {
    const auto g = static_cast<GridGroup>(gi);
    const Members& m = grid.members(g);
    Communicator& c = grid.group(g);
    ASSERT_EQ(c.size(), static_cast<int>(m.size())) << grid_group_name(g);
    EXPECT_EQ(m[c.rank()], grid.rank()) << grid_group_name(g);
    EXPECT_EQ(c.name(), grid_group_name(g));
    int32_t sum = grid.rank();
    c.all_reduce(&sum, 1, DType::i32);
    EXPECT_EQ(sum, std::accumulate(m.begin(), m.end(), 0)) << grid_group_name(g);
  }
}

TEST(Grid, CoordinatesRoundTripInnermostFirst) {
  const GridDims d{.tp = 2, .sp_ulysses = 3, .sp_ring = 1, .dp = 2, .pp = 2};
  for (int r = 0; r < 24; ++r) EXPECT_EQ(ProcessGrid::rank_of(d, ProcessGrid::coords_of(d, r)), r);
  EXPECT_EQ(ProcessGrid::coords_of(d, 1), (GridCoords{1, 0, 0, 0, 0}));
  EXPECT_EQ(ProcessGrid::coords_of(d, 2), (GridCoords{0, 1, 0, 0, 0}));
  EXPECT_EQ(ProcessGrid::coords_of(d, 6), (GridCoords{0, 0, 0, 1, 0}));
  EXPECT_EQ(ProcessGrid::coords_of(d, 23), (GridCoords{1, 2, 0, 1, 1}));
}

TEST(Grid, ValidationNamesTheKeys) {
  auto message = [](const GridDims& d, int world_size) -> std::string {
    try {
      ProcessGrid::validate(d, world_size);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_PRED2(contains, message({.dp = 3}, 4), "parallel.dp (3)");
  EXPECT_PRED2(contains, message({.dp = 3}, 4), "world size is 4");
  EXPECT_PRED2(contains, message({.sp_ulysses = 3, .dp = 0}, 4), "cannot derive parallel.dp");
  EXPECT_PRED2(contains, message({.tp = 0}, 4), "parallel.tp must be at least 1");
  EXPECT_PRED2(contains, message({.dp = 4, .ranks_per_node = 3}, 4), "parallel.ranks_per_node (3)");
  EXPECT_EQ(ProcessGrid::validate({.sp_ring = 2, .dp = 0}, 8).dp, 4);
  EXPECT_EQ(message({.tp = 2, .dp = 2, .ranks_per_node = 2}, 4), "");
}

TEST(Grid, DefaultIsAllDataParallel) {
  ProcessGrid grid(world(), {.dp = 0});
  const int P = world().size(), r = world().rank();
  EXPECT_EQ(grid.dims().dp, P);
  EXPECT_EQ(grid.coords(), (GridCoords{0, 0, 0, r, 0}));
  Members all(P);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(grid.members(GridGroup::dp), all);
  EXPECT_EQ(grid.members(GridGroup::dp_sp), all);
  EXPECT_EQ(grid.members(GridGroup::world), all);
  EXPECT_EQ(grid.members(GridGroup::tp), Members{r});
  EXPECT_EQ(grid.members(GridGroup::sp), Members{r});
  // Real hosts: the test runs on one.
  EXPECT_EQ(grid.num_nodes(), 1);
  EXPECT_EQ(grid.members(GridGroup::intra_node), all);
  EXPECT_EQ(grid.members(GridGroup::inter_node), Members{r});
  for (int gi = 0; gi < kNumGridGroups; ++gi)
    EXPECT_TRUE(grid.group(static_cast<GridGroup>(gi)).intra_node());
  expect_groups_work(grid);
}

TEST(Grid, DataParallelTimesUlysses) {
  NEED_RANKS(4);
  ProcessGrid grid(world(), {.sp_ulysses = 2, .dp = 2});
  const int r = world().rank();
  EXPECT_EQ(grid.coords(), (GridCoords{0, r % 2, 0, r / 2, 0}));
  EXPECT_EQ(grid.members(GridGroup::sp_ulysses), (Members{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(grid.members(GridGroup::sp), grid.members(GridGroup::sp_ulysses));
  EXPECT_EQ(grid.members(GridGroup::sp_ring), Members{r});
  EXPECT_EQ(grid.members(GridGroup::dp), (Members{r % 2, r % 2 + 2}));
  EXPECT_EQ(grid.members(GridGroup::dp_sp), (Members{0, 1, 2, 3}));
  EXPECT_EQ(grid.members(GridGroup::pp), Members{r});
  EXPECT_EQ(grid.sp_ulysses().rank(), r % 2);
  EXPECT_EQ(grid.dp().rank(), r / 2);
  expect_groups_work(grid);
}

TEST(Grid, RingTimesUlysses) {
  NEED_RANKS(4);
  ProcessGrid grid(world(), {.sp_ulysses = 2, .sp_ring = 2, .dp = 1});
  const int r = world().rank();
  EXPECT_EQ(grid.coords(), (GridCoords{0, r % 2, r / 2, 0, 0}));
  EXPECT_EQ(grid.members(GridGroup::sp_ulysses), (Members{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(grid.members(GridGroup::sp_ring), (Members{r % 2, r % 2 + 2}));
  EXPECT_EQ(grid.members(GridGroup::sp), (Members{0, 1, 2, 3}));
  EXPECT_EQ(grid.sp().rank(), r);  // ulysses fastest inside the 2-D group
  EXPECT_EQ(grid.members(GridGroup::dp), Members{r});
  EXPECT_EQ(grid.members(GridGroup::dp_sp), (Members{0, 1, 2, 3}));
  expect_groups_work(grid);
}

TEST(Grid, TensorTimesPipeline) {
  NEED_RANKS(4);
  ProcessGrid grid(world(), {.tp = 2, .dp = 1, .pp = 2});
  const int r = world().rank();
  EXPECT_EQ(grid.coords(), (GridCoords{r % 2, 0, 0, 0, r / 2}));
  EXPECT_EQ(grid.members(GridGroup::tp), (Members{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(grid.members(GridGroup::pp), (Members{r % 2, r % 2 + 2}));
  EXPECT_EQ(grid.members(GridGroup::dp_sp), Members{r});
  expect_groups_work(grid);
}

TEST(Grid, EmulatedNodesSplitIntraAndInter) {
  NEED_RANKS(4);
  ProcessGrid grid(world(), {.tp = 2, .dp = 2, .ranks_per_node = 2});
  const int r = world().rank();
  EXPECT_TRUE(grid.emulated_nodes());
  EXPECT_EQ(grid.num_nodes(), 2);
  EXPECT_EQ(grid.node(), r / 2);
  EXPECT_EQ(grid.local_rank(), r % 2);
  EXPECT_EQ(grid.members(GridGroup::intra_node), (Members{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(grid.members(GridGroup::inter_node), (Members{r % 2, r % 2 + 2}));
  EXPECT_TRUE(grid.intra_node().intra_node());
  EXPECT_FALSE(grid.inter_node().intra_node());
  EXPECT_TRUE(grid.tp().intra_node());  // tp is innermost, so it stays on a node
  EXPECT_FALSE(grid.dp().intra_node());
  EXPECT_FALSE(grid.world().intra_node());
  EXPECT_TRUE(grid.pp().intra_node());  // a group of one
  expect_groups_work(grid);
  // The byte report follows the levels.
  world().stats().reset();
  std::vector<float> x(100, 1.0f);
  grid.tp().all_reduce(x.data(), x.size(), DType::f32);
  grid.dp().all_reduce(x.data(), 50, DType::f32);
  EXPECT_EQ(world().stats().bytes(true), 400u);
  EXPECT_EQ(world().stats().bytes(false), 200u);
}

TEST(Grid, EmulatedNodesOfOneRankMakeEverythingInter) {
  ProcessGrid grid(world(), {.dp = 0, .ranks_per_node = 1});
  EXPECT_EQ(grid.num_nodes(), world().size());
  EXPECT_EQ(grid.members(GridGroup::intra_node), Members{world().rank()});
  EXPECT_EQ(grid.dp().intra_node(), world().size() == 1);
  expect_groups_work(grid);
}

TEST(Grid, DescribeHasOneLinePerGroup) {
  ProcessGrid grid(world(), {.dp = 0});
  const std::string text = grid.describe();
  if (world().rank() == 0) std::fputs(text.c_str(), stdout);
  for (int gi = 0; gi < kNumGridGroups; ++gi)
    EXPECT_PRED2(contains, text, std::string("  ") + grid_group_name(static_cast<GridGroup>(gi)) + " ");
  EXPECT_PRED2(contains, text, "dp " + std::to_string(world().size()));
}

}  // namespace
}  // namespace odyssey
