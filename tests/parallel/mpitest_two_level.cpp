// The two-level reduce-scatter (TLq / TLq-HS / qgZ) on its own, at whatever rank count mpirun gives,
// the ranks split into two emulated nodes where there are at least two:
//   - pipelined in 2, 3, 7 or 64 slices it is bitwise the unsliced collective, for every format, with
//     shards that are not a multiple of the slice alignment (a short last slice, slices capped by the
//     number of whole groups);
//   - with the formats switched to identity it is the fp32 sum in the collective's order (per node,
//     then over nodes), exactly;
//   - with real quantization it stays near the exact sum: relative L2 error below 0.5 (4-bit stochastic
//     rounding of uniform data gives ~0.1–0.3; a misrouted block would be off by more than the sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/sdp4bit.h"

using namespace odyssey;

namespace {

struct Groups : NodeSplit {
  size_t D = 1, N = 1;
};

// Two nodes where there are two ranks or more.
Groups two_nodes() {
  Communicator& w = world();
  Groups g;
  g.D = w.size() >= 2 ? size_t(w.size()) / 2 : 1;
  g.N = size_t(w.size()) / g.D;
  static_cast<NodeSplit&>(g) = split_nodes(w, int(g.D));
  return g;
}

// Rank r's gradient: P·S pseudo-random values in (-1, 1), different on every rank and element.
std::vector<float> gradient(int rank, size_t P, size_t S) {
  std::vector<float> g(P * S);
  uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(rank + 1);
  for (float& v : g) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    v = float(double(x >> 11) / double(uint64_t{1} << 53) * 2.0 - 1.0);
  }
  return g;
}

WireFormat format(const std::string& grads, bool identity, bool inter) {
  CommOptions c;
  c.grads = parse_enum(kGradCommNames, grads, "comm.grads");
  c.identity = identity;
  return inter ? grad_inter_format(c) : grad_intra_format(c);
}

std::vector<float> run(Groups& g, const std::string& grads, bool identity, size_t S, size_t slices) {
  const size_t P = g.D * g.N;
  const std::vector<float> send = gradient(world().rank(), P, S);
  std::vector<float> recv(S, -1.0f);
  const RoundingKey key{1234, 5, uint32_t(world().rank()), 6, 0};
  two_level_reduce_scatter(*g.intra, *g.inter, format(grads, identity, false), format(grads, identity, true),
                           send.data(), recv.data(), S, key, slices);
  return recv;
}

class TwoLevel : public ::testing::TestWithParam<const char*> {};

TEST_P(TwoLevel, PipelinedSlicesAreBitwiseTheUnslicedCollective) {
  Groups g = two_nodes();
  // 1184 = 9.25 groups of 128 (2.3 of 512), 4096 whole groups, 96 less than one group.
  for (size_t S : {size_t(1184), size_t(4096), size_t(96)}) {
    for (bool identity : {false, true}) {
      const std::vector<float> whole = run(g, GetParam(), identity, S, 1);
      for (size_t slices : {size_t(2), size_t(3), size_t(7), size_t(64)}) {
        const std::vector<float> piped = run(g, GetParam(), identity, S, slices);
        for (size_t i = 0; i < S; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(piped[i]), std::bit_cast<uint32_t>(whole[i]))
              << GetParam() << " identity " << identity << " S " << S << " slices " << slices << " i " << i;
      }
    }
  }
}

TEST_P(TwoLevel, IdentityIsTheFp32SumInCollectiveOrderAndQuantizedStaysClose) {
  Groups g = two_nodes();
  const size_t P = g.D * g.N, S = 1184, r = size_t(world().rank());
  std::vector<std::vector<float>> all;
  for (size_t q = 0; q < P; ++q) all.push_back(gradient(int(q), P, S));
  // Per node n: Σ_d g[n·D + d] in order; then Σ_n of those in order.
  std::vector<float> expect(S);
  for (size_t i = 0; i < S; ++i) {
    float total = 0.0f;
    for (size_t n = 0; n < g.N; ++n) {
      float node = 0.0f;
      for (size_t d = 0; d < g.D; ++d) {
        const float v = all[n * g.D + d][r * S + i];
        node = d == 0 ? v : node + v;
      }
      total = n == 0 ? node : total + node;
    }
    expect[i] = total;
  }
  const std::vector<float> id = run(g, GetParam(), true, S, 3);
  for (size_t i = 0; i < S; ++i) ASSERT_EQ(id[i], expect[i]) << "i " << i;

  const std::vector<float> q = run(g, GetParam(), false, S, 3);
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < S; ++i) {
    err += (double(q[i]) - expect[i]) * (double(q[i]) - expect[i]);
    norm += double(expect[i]) * expect[i];
  }
  const double rel = std::sqrt(err / norm);
  if (world().rank() == 0) std::printf("%s: relative L2 error %.4f over %zu ranks\n", GetParam(), rel, P);
  EXPECT_LT(rel, 0.5) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Formats, TwoLevel, ::testing::Values("tlq", "tlq_hs", "qgz"));

}  // namespace
