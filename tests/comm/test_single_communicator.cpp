// The single-rank Communicator: copies and no-ops with the MPI semantics, 0 bytes accounted.
#include <gtest/gtest.h>

#include <vector>

#include "odyssey/comm/single_communicator.h"
#include "odyssey/core/error.h"

namespace odyssey {
namespace {

TEST(SingleCommunicator, CollectivesAreIdentities) {
  SingleCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "world");
  std::vector<float> a{1, 2, 3}, b(3, 0.0f);
  c.all_reduce(a.data(), 3, DType::f32);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  c.reduce_scatter(a.data(), b.data(), 3, DType::f32);
  EXPECT_EQ(b, a);
  std::fill(b.begin(), b.end(), 0.0f);
  c.all_gather_async(a.data(), b.data(), 3, DType::f32)->wait();
  EXPECT_EQ(b, a);
  c.all_gather(b.data(), b.data(), 3, DType::f32);  // in place
  EXPECT_EQ(b, a);
  std::fill(b.begin(), b.end(), 0.0f);
  c.all_to_all(a.data(), b.data(), 3, DType::f32);
  EXPECT_EQ(b, a);
  std::vector<float> v(6, 0.0f);
  c.all_to_all_v(a.data(), {2}, {1}, v.data(), {2}, {3}, DType::f32);
  EXPECT_EQ(v, (std::vector<float>{0, 0, 0, 2, 3, 0}));
  c.broadcast(a.data(), 3, DType::f32, 0);
  c.barrier();
  EXPECT_THROW(c.broadcast(a.data(), 3, DType::f32, 1), Error);
  EXPECT_EQ(c.stats().total_bytes(), 0u);
  EXPECT_EQ(c.stats().to_json()["by_kind"]["all_gather"]["calls"], 2u);
}

// One rank: max, min and sum all leave the values as they are, and count no bytes.
TEST(SingleCommunicator, EveryReduceOpIsTheIdentity) {
  SingleCommunicator c;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    std::vector<float> a{-1, 2.5f, 3}, b(3, 0.0f);
    c.all_reduce(a.data(), 3, DType::f32, op);
    c.all_reduce_async(a.data(), 3, DType::f32, op)->wait();
    EXPECT_EQ(a, (std::vector<float>{-1, 2.5f, 3})) << reduce_op_name(op);
    c.reduce_scatter(a.data(), b.data(), 3, DType::f32, op);
    EXPECT_EQ(b, a) << reduce_op_name(op);
    std::fill(b.begin(), b.end(), 0.0f);
    c.reduce_scatter_async(a.data(), b.data(), 3, DType::f32, op)->wait();
    EXPECT_EQ(b, a) << reduce_op_name(op);
  }
  EXPECT_EQ(c.stats().total_bytes(), 0u);
  EXPECT_EQ(c.stats().to_json()["by_kind"]["all_reduce"]["calls"], 6u);
  EXPECT_STREQ(reduce_op_name(ReduceOp::max), "max");
}

TEST(SingleCommunicator, SendToSelfInOrderByTag) {
  SingleCommunicator c;
  const int32_t x = 5, y = 6, z = 7;
  int32_t out = 0;
  RequestPtr pending = c.recv_async(&out, 1, DType::i32, 0, 9);  // posted before its send
  EXPECT_FALSE(pending->test());
  c.send(&x, 1, DType::i32, 0, 1);
  c.send(&y, 1, DType::i32, 0, 1);
  c.send_async(&z, 1, DType::i32, 0, 9)->wait();
  EXPECT_TRUE(pending->test());
  EXPECT_EQ(out, 7);
  c.recv(&out, 1, DType::i32, 0, 1);
  EXPECT_EQ(out, 5);
  c.recv(&out, 1, DType::i32, 0, 1);
  EXPECT_EQ(out, 6);
  // Nothing left: a receive on one rank can never complete, so it fails rather than hangs.
  EXPECT_THROW(c.recv(&out, 1, DType::i32, 0, 1), Error);
  EXPECT_THROW(c.recv_async(&out, 1, DType::i32, 0, 2)->wait(), Error);
  EXPECT_EQ(c.stats().total_bytes(), 0u);
}

TEST(SingleCommunicator, SplitSharesStats) {
  SingleCommunicator c;
  auto g = c.split(0, 0, "dp", false);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->name(), "dp");
  EXPECT_FALSE(g->intra_node());
  EXPECT_EQ(&g->stats(), &c.stats());
  EXPECT_EQ(c.split(-1, 0, "none", true), nullptr);
}

}  // namespace
}  // namespace odyssey
