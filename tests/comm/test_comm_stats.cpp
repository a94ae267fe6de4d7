// Byte and time accounting without MPI: the counters, the JSON report, and the bus-byte formula.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/comm/comm_stats.h"

namespace odyssey {
namespace {

TEST(CommStats, CountsPerKindAndLevel) {
  CommStats s;
  s.record("dp", CommKind::all_reduce, true, 100, 0.5);
  s.record("tp", CommKind::all_reduce, false, 30, 0.25);
  s.record("tp", CommKind::all_gather, false, 7, 0.0);
  s.add_time("tp", CommKind::all_gather, false, 1.0);
  EXPECT_EQ(s.total_bytes(), 137u);
  EXPECT_EQ(s.bytes(true), 100u);
  EXPECT_EQ(s.bytes(false), 37u);
  EXPECT_EQ(s.bytes(CommKind::all_reduce), 130u);
  EXPECT_EQ(s.bytes(CommKind::broadcast), 0u);

  const auto j = s.to_json();
  EXPECT_EQ(j["total_bytes"], 137u);
  EXPECT_EQ(j["intra_node_bytes"], 100u);
  EXPECT_EQ(j["inter_node_bytes"], 37u);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 1.75);
  const auto& ar = j["by_kind"]["all_reduce"];
  EXPECT_EQ(ar["calls"], 2u);
  EXPECT_EQ(ar["bytes"], 130u);
  EXPECT_EQ(ar["intra_node_bytes"], 100u);
  EXPECT_EQ(ar["inter_node_bytes"], 30u);
  EXPECT_DOUBLE_EQ(ar["seconds"].get<double>(), 0.75);
  const auto& ag = j["by_kind"]["all_gather"];
  EXPECT_EQ(ag["calls"], 1u);  // add_time adds time, not a call
  EXPECT_DOUBLE_EQ(ag["seconds"].get<double>(), 1.0);
  EXPECT_FALSE(j["by_kind"].contains("broadcast"));
  // The same calls by the group they ran on.
  EXPECT_EQ(s.group_bytes("dp"), 100u);
  EXPECT_EQ(s.group_bytes("tp"), 37u);
  EXPECT_EQ(s.group_bytes("tp", CommKind::all_gather), 7u);
  EXPECT_EQ(s.group_bytes("sp_ring"), 0u);
  EXPECT_EQ(j["by_group"]["tp"]["bytes"], 37u);
  EXPECT_EQ(j["by_group"]["tp"]["calls"], 2u);
  EXPECT_DOUBLE_EQ(j["by_group"]["tp"]["seconds"].get<double>(), 1.25);
  EXPECT_EQ(j["by_group"]["dp"]["bytes"], 100u);

  s.reset();
  EXPECT_EQ(s.total_bytes(), 0u);
  EXPECT_TRUE(s.to_json()["by_kind"].empty());
}

TEST(CommStats, KindNames) {
  EXPECT_STREQ(comm_kind_name(CommKind::all_reduce), "all_reduce");
  EXPECT_STREQ(comm_kind_name(CommKind::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(comm_kind_name(CommKind::all_gather), "all_gather");
  EXPECT_STREQ(comm_kind_name(CommKind::all_to_all), "all_to_all");
  EXPECT_STREQ(comm_kind_name(CommKind::send_recv), "send_recv");
  EXPECT_STREQ(comm_kind_name(CommKind::broadcast), "broadcast");
}

TEST(CommStats, ThreadSafe) {
  CommStats s;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) s.record("pp", CommKind::send_recv, i % 2 == 0, 3, 0.0);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.total_bytes(), 12000u);
  EXPECT_EQ(s.bytes(true), 6000u);
}

TEST(BusBytes, NcclTestsConvention) {
  // all-reduce: 2(P-1)/P of the buffer
  EXPECT_EQ(bus_bytes(CommKind::all_reduce, 1000, 1), 0u);
  EXPECT_EQ(bus_bytes(CommKind::all_reduce, 1000, 2), 1000u);
  EXPECT_EQ(bus_bytes(CommKind::all_reduce, 1000, 4), 1500u);
  EXPECT_EQ(bus_bytes(CommKind::all_reduce, 1000, 3), 1333u);  // rounded down
  // all-gather, reduce-scatter, all-to-all: (P-1)/P of all blocks
  for (CommKind k : {CommKind::all_gather, CommKind::reduce_scatter, CommKind::all_to_all}) {
    EXPECT_EQ(bus_bytes(k, 4000, 4), 3000u);
    EXPECT_EQ(bus_bytes(k, 4000, 1), 0u);
  }
  EXPECT_EQ(bus_bytes(CommKind::send_recv, 44, 2), 44u);
  EXPECT_EQ(bus_bytes(CommKind::broadcast, 44, 8), 44u);
  EXPECT_EQ(bus_bytes(CommKind::broadcast, 44, 1), 0u);
  // No overflow for buffers far beyond 32 bits.
  const uint64_t big = uint64_t{1} << 60;
  EXPECT_EQ(bus_bytes(CommKind::all_reduce, big, 4), big / 2 * 3);
}

}  // namespace
}  // namespace odyssey
