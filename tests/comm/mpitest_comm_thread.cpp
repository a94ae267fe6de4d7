// The communication thread (comm/comm_thread.h) over a duplicate of world: collectives started back to
// back run first in, first out and give exactly what the communicator's own give (rank-coded integers
// in fp32, so every summation order is exact), waited in any order; a request dropped unwaited still
// completes; the overlap times add up and reset; the hidden fraction stays in [0, 1].
#include <gtest/gtest.h>

#include <vector>

#include "odyssey/comm/comm_thread.h"
#include "odyssey/comm/runtime.h"

namespace odyssey {
namespace {

TEST(CommThread, RunsCollectivesInOrderWithTheCommunicatorsResults) {
  ASSERT_TRUE(runtime_thread_multiple()) << "the runtime asks for MPI_THREAD_MULTIPLE";
  Communicator& w = world();
  const int P = w.size(), r = w.rank();
  CommThread thread(w.split(0, r, "dup", w.intra_node()));
  EXPECT_EQ(thread.size(), P);
  EXPECT_EQ(thread.rank(), r);
  constexpr int kOps = 6;
  constexpr size_t n = 1000;  // per rank block of the reduce-scatters
  std::vector<std::vector<float>> sums(kOps), blocks(kOps), want_sums(kOps), want_blocks(kOps);
  std::vector<std::vector<float>> sends(kOps);
  std::vector<RequestPtr> requests;
  for (int k = 0; k < kOps; ++k) {
    sums[k].resize(n * P), sends[k].resize(n * P), blocks[k].assign(n, -1.0f);
    for (size_t i = 0; i < n * P; ++i) sums[k][i] = sends[k][i] = float(1000 * r + 7 * k + int(i % 97));
    want_sums[k] = sums[k], want_blocks[k].assign(n, 0.0f);
    w.all_reduce(want_sums[k].data(), want_sums[k].size(), DType::f32);
    w.reduce_scatter(sends[k].data(), want_blocks[k].data(), n, DType::f32);
    requests.push_back(thread.all_reduce(sums[k].data(), sums[k].size()));
    requests.push_back(thread.reduce_scatter(sends[k].data(), blocks[k].data(), n));
  }
  // Waited last first, and one dropped without a wait (its destructor completes it).
  for (int i = int(requests.size()) - 1; i >= 2; --i) requests[size_t(i)]->wait();
  requests[0]->test();
  requests.clear();
  for (int k = 0; k < kOps; ++k) {
    EXPECT_EQ(sums[k], want_sums[k]) << "all-reduce " << k;
    EXPECT_EQ(blocks[k], want_blocks[k]) << "reduce-scatter " << k;
  }
  const OverlapTimes t = thread.take_times();
  EXPECT_GT(t.comm_seconds, 0.0);
  EXPECT_GE(t.wait_seconds, 0.0);
  const double h = t.hidden_fraction();
  EXPECT_GE(h, 0.0);
  EXPECT_LE(h, 1.0);
  const OverlapTimes again = thread.take_times();
  EXPECT_EQ(again.comm_seconds, 0.0);
  EXPECT_EQ(again.wait_seconds, 0.0);
}

TEST(CommThread, HiddenFraction) {
  EXPECT_EQ((OverlapTimes{0.0, 0.0}).hidden_fraction(), 1.0);  // nothing to hide
  EXPECT_EQ((OverlapTimes{2.0, 0.5}).hidden_fraction(), 0.75);
  EXPECT_EQ((OverlapTimes{1.0, 3.0}).hidden_fraction(), 0.0);  // waited longer than it ran: none hidden
}

}  // namespace
}  // namespace odyssey
