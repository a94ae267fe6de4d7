// The communication thread (comm/comm_thread.h) over a duplicate of world: collectives started back to
// back run first in, first out and give exactly what the communicator's own give (rank-coded integers
// in fp32, so every summation order is exact), waited in any order; a request dropped unwaited still
// completes; the overlap times add up and reset; the hidden fraction stays in [0, 1]. A
// ThreadedCommunicator accounts each call when it is made, not when the thread gets to it, once.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "odyssey/comm/bus_bytes.h"
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

// ZeRO's traffic is the accounting's difference over windows of the caller (a micro-step's backward, its
// forward): a call made in a window must count in it even when the thread starts it after the window.
// The thread is held busy while calls are made; their bytes and trace records are there at once, in the
// order made, and counted once when the thread has run them.
TEST(CommThread, ThreadedCallsAreAccountedWhenMade) {
  ASSERT_TRUE(runtime_thread_multiple()) << "the runtime asks for MPI_THREAD_MULTIPLE";
  Communicator& w = world();
  const int P = w.size(), r = w.rank();
  std::unique_ptr<Communicator> inner = w.split(0, r, "dup", w.intra_node());
  CommThread thread;
  ThreadedCommunicator tc(thread, *inner);
  CommStats& stats = inner->stats();
  stats.set_trace(true);
  stats.reset();
  std::promise<void> go;
  RequestPtr busy = thread.run([released = go.get_future().share()] { released.wait(); });
  constexpr size_t n = 300;
  std::vector<float> mine(n, float(r + 1)), all(n * size_t(P)), sum(n, float(r + 1));
  RequestPtr gather = tc.all_gather_async(mine.data(), all.data(), n, DType::f32);
  RequestPtr reduce = tc.all_reduce_async(sum.data(), n, DType::f32);
  const uint64_t want_gather = call_bus_bytes(CommKind::all_gather, n, sizeof(float), P);
  const uint64_t want_reduce = call_bus_bytes(CommKind::all_reduce, n, sizeof(float), P);
  auto check = [&](const char* when) {
    EXPECT_EQ(stats.bytes(CommKind::all_gather), want_gather) << when;
    EXPECT_EQ(stats.bytes(CommKind::all_reduce), want_reduce) << when;
    const std::vector<CommTraceRecord> trace = stats.trace();
    ASSERT_EQ(trace.size(), 2u) << when;
    EXPECT_EQ(trace[0].kind, CommKind::all_gather) << when;
    EXPECT_EQ(trace[0].count, n) << when;
    EXPECT_EQ(trace[1].kind, CommKind::all_reduce) << when;
    EXPECT_EQ(trace[1].bus_bytes, want_reduce) << when;
  };
  check("before the thread ran them");
  go.set_value();
  busy->wait(), gather->wait(), reduce->wait();
  check("after");
  for (int j = 0; j < P; ++j) EXPECT_EQ(all[size_t(j) * n], float(j + 1));
  EXPECT_EQ(sum[0], float(P * (P + 1) / 2));
  stats.set_trace(false);
  stats.reset();
}

TEST(CommThread, HiddenFraction) {
  EXPECT_EQ((OverlapTimes{0.0, 0.0}).hidden_fraction(), 1.0);  // nothing to hide
  EXPECT_EQ((OverlapTimes{2.0, 0.5}).hidden_fraction(), 0.75);
  EXPECT_EQ((OverlapTimes{1.0, 3.0}).hidden_fraction(), 0.0);  // waited longer than it ran: none hidden
}

}  // namespace
}  // namespace odyssey
