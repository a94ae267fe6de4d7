// Every collective of the MPI Communicator against expected values, at whatever rank count mpirun
// gives (ctest runs 1, 2 and 4), with odd counts, the async forms, uneven all_to_all_v, split
// groups, the chunked paths for counts above the MPI int limit (emulated with a tiny chunk), and the
// exact bus bytes of each kind, split intra-/inter-node.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/comm/mpi_communicator.h"
#include "odyssey/comm/runtime.h"

namespace odyssey {
namespace {

// Runs the body with MPI's own limit and with a 3-element chunk, so every operation also goes
// through its chunked path (pieces, per-block reductions / broadcasts, point-to-point all-to-all).
class Collectives : public testing::TestWithParam<size_t> {
 protected:
  void SetUp() override { MpiCommunicator::set_max_chunk(GetParam()); }
  void TearDown() override { MpiCommunicator::set_max_chunk(INT_MAX); }
  Communicator& w = world();
  const int P = w.size();
  const int r = w.rank();
};

INSTANTIATE_TEST_SUITE_P(Chunk, Collectives, testing::Values(size_t{INT_MAX}, size_t{3}),
                         [](const auto& info) { return info.param == 3 ? std::string("chunk3") : "whole"; });

TEST_P(Collectives, AllReduceSumsEveryType) {
  const size_t n = 1001;
  std::vector<float> f(n);
  std::vector<int32_t> i(n);
  std::vector<uint8_t> u(n);
  for (size_t k = 0; k < n; ++k) {
    f[k] = static_cast<float>(r * 1000 + k);
    i[k] = static_cast<int32_t>(r - static_cast<int>(k));
    u[k] = static_cast<uint8_t>((r + k) % 7);
  }
  w.all_reduce(f.data(), n, DType::f32);
  w.all_reduce(i.data(), n, DType::i32);
  w.all_reduce(u.data(), n, DType::u8);
  const int rsum = P * (P - 1) / 2;
  for (size_t k = 0; k < n; ++k) {
    ASSERT_EQ(f[k], static_cast<float>(rsum * 1000 + P * k)) << k;
    ASSERT_EQ(i[k], rsum - P * static_cast<int>(k)) << k;
    int usum = 0;
    for (int q = 0; q < P; ++q) usum += (q + k) % 7;
    ASSERT_EQ(u[k], usum) << k;
  }
}

TEST_P(Collectives, AllReduceAsyncCompletesByPolling) {
  const size_t n = 77;
  std::vector<float> a(n, static_cast<float>(r + 1)), b(n, 1.0f);
  RequestPtr ra = w.all_reduce_async(a.data(), n, DType::f32);
  RequestPtr rb = w.all_reduce_async(b.data(), n, DType::f32);
  while (!ra->test()) {
  }
  EXPECT_TRUE(ra->test());  // stays complete
  rb->wait();
  rb->wait();  // a second wait is harmless
  for (size_t k = 0; k < n; ++k) {
    ASSERT_EQ(a[k], P * (P + 1) / 2.0f);
    ASSERT_EQ(b[k], static_cast<float>(P));
  }
  // Destroying an unfinished request waits for it.
  std::vector<int32_t> c(5, 2);
  w.all_reduce_async(c.data(), c.size(), DType::i32);
  EXPECT_EQ(c[4], 2 * P);
}

TEST_P(Collectives, ReduceScatterSumsOwnBlock) {
  const size_t n = 37;
  std::vector<float> send(P * n), recv(n, -1.0f);
  for (int j = 0; j < P; ++j)
    for (size_t k = 0; k < n; ++k) send[j * n + k] = static_cast<float>(r + j * 100 + k);
  auto check = [&] {
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(recv[k], P * (P - 1) / 2.0f + P * (r * 100.0f + k)) << k;
  };
  w.reduce_scatter(send.data(), recv.data(), n, DType::f32);
  check();
  std::fill(recv.begin(), recv.end(), -1.0f);
  RequestPtr req = w.reduce_scatter_async(send.data(), recv.data(), n, DType::f32);
  while (!req->test()) {
  }
  check();
}

// Max and min over every type, sync and async: value k of rank q is a pattern whose extreme rank
// changes with k (so no single rank wins everywhere); the explicit sum agrees with the default. u8
// values stay below 64 so that 4 ranks' sum cannot overflow (Open MPI's vectorised u8 sum saturates
// where its scalar path wraps).
TEST_P(Collectives, AllReduceMaxMinEveryType) {
  const size_t n = 1001;
  auto fval = [](int q, size_t k) { return static_cast<float>(((q * 7 + k * 3) % 11) - 5.5f * (k % 2)); };
  auto ival = [](int q, size_t k) { return static_cast<int32_t>((q * 13 + k) % 17) - 8; };
  auto uval = [](int q, size_t k) { return static_cast<uint8_t>((q * 101 + k * 7) % 60); };
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min, ReduceOp::sum}) {
    SCOPED_TRACE(reduce_op_name(op));
    std::vector<float> f(n);
    std::vector<int32_t> i(n);
    std::vector<uint8_t> u(n);
    for (size_t k = 0; k < n; ++k) f[k] = fval(r, k), i[k] = ival(r, k), u[k] = uval(r, k);
    w.all_reduce(f.data(), n, DType::f32, op);
    w.all_reduce_async(i.data(), n, DType::i32, op)->wait();
    RequestPtr req = w.all_reduce_async(u.data(), n, DType::u8, op);
    while (!req->test()) {
    }
    for (size_t k = 0; k < n; ++k) {
      float fe = fval(0, k);
      int32_t ie = ival(0, k);
      int ue = uval(0, k);
      for (int q = 1; q < P; ++q) {
        if (op == ReduceOp::max)
          fe = std::max(fe, fval(q, k)), ie = std::max(ie, ival(q, k)), ue = std::max<int>(ue, uval(q, k));
        if (op == ReduceOp::min)
          fe = std::min(fe, fval(q, k)), ie = std::min(ie, ival(q, k)), ue = std::min<int>(ue, uval(q, k));
        if (op == ReduceOp::sum) fe += fval(q, k), ie += ival(q, k), ue += uval(q, k);
      }
      ASSERT_EQ(f[k], fe) << k;
      ASSERT_EQ(i[k], ie) << k;
      ASSERT_EQ(u[k], ue) << k;
    }
  }
}

TEST_P(Collectives, ReduceScatterMaxOwnBlock) {
  const size_t n = 37;
  std::vector<float> send(P * n), recv(n, -1.0f);
  // Block j, element k of rank q: (q - j - k) mod P, so over the ranks it takes every value 0..P-1,
  // with the maximum on a different rank for each k.
  auto val = [&](int q, int j, size_t k) {
    return static_cast<float>(((q - j - static_cast<int>(k)) % P + P) % P);
  };
  for (int j = 0; j < P; ++j)
    for (size_t k = 0; k < n; ++k) send[j * n + k] = val(r, j, k) + 10.0f * j;
  w.reduce_scatter(send.data(), recv.data(), n, DType::f32, ReduceOp::max);
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(recv[k], (P - 1) + 10.0f * r) << k;
  std::fill(recv.begin(), recv.end(), -1.0f);
  w.reduce_scatter_async(send.data(), recv.data(), n, DType::f32, ReduceOp::min)->wait();
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(recv[k], 10.0f * r) << k;
}

TEST_P(Collectives, AllGatherInRankOrderAndInPlace) {
  const size_t n = 13;
  std::vector<int32_t> mine(n), all(P * n, -1);
  for (size_t k = 0; k < n; ++k) mine[k] = r * 100 + static_cast<int32_t>(k);
  auto check = [&] {
    for (int j = 0; j < P; ++j)
      for (size_t k = 0; k < n; ++k) ASSERT_EQ(all[j * n + k], j * 100 + static_cast<int32_t>(k));
  };
  w.all_gather(mine.data(), all.data(), n, DType::i32);
  check();
  std::fill(all.begin(), all.end(), -1);
  std::copy(mine.begin(), mine.end(), all.begin() + r * n);
  w.all_gather(all.data() + r * n, all.data(), n, DType::i32);  // in place
  check();
  std::fill(all.begin(), all.end(), -1);
  w.all_gather_async(mine.data(), all.data(), n, DType::i32)->wait();
  check();
}

TEST_P(Collectives, AllToAllTransposesBlocks) {
  const size_t n = 5;
  std::vector<float> send(P * n), recv(P * n, -1.0f);
  for (int j = 0; j < P; ++j)
    for (size_t k = 0; k < n; ++k) send[j * n + k] = static_cast<float>(r * 1000 + j * 10 + k);
  w.all_to_all(send.data(), recv.data(), n, DType::f32);
  for (int i = 0; i < P; ++i)
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(recv[i * n + k], static_cast<float>(i * 1000 + r * 10 + k));
}

// Three all-to-alls in flight at once on one communicator (as the pipelined two-level reduce-scatter
// keeps them), completed in reverse order: each delivers its own blocks, also when chunked.
TEST_P(Collectives, AllToAllAsyncSeveralInFlight) {
  const size_t n = 7;
  constexpr int kOps = 3;
  std::vector<std::vector<int32_t>> send(kOps, std::vector<int32_t>(P * n)), recv(kOps);
  std::vector<RequestPtr> reqs;
  for (int op = 0; op < kOps; ++op) {
    for (int j = 0; j < P; ++j)
      for (size_t k = 0; k < n; ++k) send[op][j * n + k] = op * 100000 + r * 1000 + j * 10 + int(k);
    recv[op].assign(P * n, -1);
    reqs.push_back(w.all_to_all_async(send[op].data(), recv[op].data(), n, DType::i32));
  }
  for (int op = kOps - 1; op >= 0; --op) {
    if (op == 1)
      while (!reqs[op]->test()) std::this_thread::yield();
    else
      reqs[op]->wait();
    for (int i = 0; i < P; ++i)
      for (size_t k = 0; k < n; ++k) ASSERT_EQ(recv[op][i * n + k], op * 100000 + i * 1000 + r * 10 + int(k));
  }
}
// Rank s sends count(s, d) elements to rank d, some of them zero, with gaps between blocks.
size_t uneven(int s, int d) {
  return static_cast<size_t>((2 * s + d) % 4 + (s == d ? 0 : 3 * s));
}

TEST_P(Collectives, AllToAllVUnevenCountsAndDisplacements) {
  std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
  size_t soff = 0, roff = 1;
  for (int j = 0; j < P; ++j) {
    sc[j] = uneven(r, j);
    rc[j] = uneven(j, r);
    sd[j] = soff;
    rd[j] = roff;
    soff += sc[j] + 2;
    roff += rc[j] + 1;
  }
  std::vector<int32_t> send(soff, -7), recv(roff, -1);
  for (int j = 0; j < P; ++j)
    for (size_t k = 0; k < sc[j]; ++k) send[sd[j] + k] = r * 10000 + j * 100 + static_cast<int32_t>(k);
  w.all_to_all_v(send.data(), sc, sd, recv.data(), rc, rd, DType::i32);
  std::vector<bool> covered(roff, false);
  for (int i = 0; i < P; ++i)
    for (size_t k = 0; k < rc[i]; ++k) {
      ASSERT_EQ(recv[rd[i] + k], i * 10000 + r * 100 + static_cast<int32_t>(k));
      covered[rd[i] + k] = true;
    }
  for (size_t k = 0; k < roff; ++k)
    if (!covered[k]) {
      ASSERT_EQ(recv[k], -1) << "gap " << k << " was written";
    }
}

TEST_P(Collectives, SendRecvRing) {
  const size_t n = 11;
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  std::vector<float> out(n), in(n, -1.0f), in2(n, -1.0f);
  for (size_t k = 0; k < n; ++k) out[k] = static_cast<float>(r * 100 + k);
  // Receive first, so a ring of one (self) and of many both work without deadlock.
  RequestPtr rr = w.recv_async(in.data(), n, DType::f32, prev, 3);
  RequestPtr rs = w.send_async(out.data(), n, DType::f32, next, 3);
  rs->wait();
  rr->wait();
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(in[k], static_cast<float>(prev * 100 + k));
  if (P % 2 == 0) {  // blocking forms: even ranks send first
    if (r % 2 == 0) {
      w.send(out.data(), n, DType::f32, next, 4);
      w.recv(in2.data(), n, DType::f32, prev, 4);
    } else {
      w.recv(in2.data(), n, DType::f32, prev, 4);
      w.send(out.data(), n, DType::f32, next, 4);
    }
    for (size_t k = 0; k < n; ++k) ASSERT_EQ(in2[k], static_cast<float>(prev * 100 + k));
  }
}

TEST_P(Collectives, BroadcastFromLastRank) {
  std::vector<uint8_t> v(9, static_cast<uint8_t>(r));
  w.broadcast(v.data(), v.size(), DType::u8, P - 1);
  for (uint8_t x : v) ASSERT_EQ(x, P - 1);
}

// Reductions in pieces (32 MiB by default, here 40 and 12 bytes: several pieces, short last ones)
// give bitwise the one-call result on values whose sum depends on the order, sync and async.
TEST(Communicator, ReductionPiecesAreBitwiseOneCall) {
  Communicator& w = world();
  const int P = w.size(), r = w.rank();
  const size_t n = 1003;
  std::vector<float> values(P * n);
  for (size_t k = 0; k < values.size(); ++k)  // magnitudes 1e-4..1e4: rounding depends on the order
    values[k] =
        std::ldexp(1.0f + float((k * 2654435761u + r * 40503u) % 1000) / 997.0f, int((k + r) % 27) - 13);
  const size_t default_piece = MpiCommunicator::max_reduction_bytes();
  auto run = [&](size_t piece_bytes, bool async) {
    MpiCommunicator::set_max_reduction_bytes(piece_bytes);
    std::vector<float> summed(values.begin(), values.begin() + n), scattered(n);
    if (async) {
      RequestPtr a = w.all_reduce_async(summed.data(), n, DType::f32);
      RequestPtr b = w.reduce_scatter_async(values.data(), scattered.data(), n, DType::f32);
      while (!b->test()) {
      }
      a->wait();
    } else {
      w.all_reduce(summed.data(), n, DType::f32);
      w.reduce_scatter(values.data(), scattered.data(), n, DType::f32);
    }
    MpiCommunicator::set_max_reduction_bytes(default_piece);
    summed.insert(summed.end(), scattered.begin(), scattered.end());
    return summed;
  };
  const std::vector<float> whole = run(default_piece, false);
  for (size_t bytes : {size_t(40), size_t(12)})
    for (bool async : {false, true}) {
      const std::vector<float> pieces = run(bytes, async);
      ASSERT_EQ(0, std::memcmp(pieces.data(), whole.data(), whole.size() * sizeof(float)))
          << bytes << "-byte pieces, async " << async;
    }
}

// Peak resident memory (VmHWM, reset through /proc/self/clear_refs) grown by a 128 MiB reduce-scatter
// and all-reduce stays within transient_bytes() (plus 8 MiB of slack): Open MPI alone would hold
// 256 MiB more on rank 0.
TEST(Communicator, ReductionTemporariesAreBounded) {
  Communicator& w = world();
  if (w.size() < 2) GTEST_SKIP() << "one rank reduces nothing";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer keeps freed memory in quarantine: the peak RSS measures it";
#endif
  auto kib = [](const char* field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
    return -1LL;
  };
  const int64_t bound = int64_t(w.transient_bytes()) + (8 << 20);
  const size_t n = (size_t(128) << 20) / sizeof(float) / size_t(w.size());
  std::vector<float> send(n * size_t(w.size()), 1.0f), recv(n, 0.0f);
  w.barrier();
  {
    std::ofstream reset("/proc/self/clear_refs");
    reset << "5";
    if (!reset.good()) GTEST_SKIP() << "cannot reset the peak RSS here";
  }
  const long long before = kib("VmRSS:");
  ASSERT_GT(before, 0);
  w.reduce_scatter(send.data(), recv.data(), n, DType::f32);
  w.all_reduce(send.data(), send.size(), DType::f32);
  EXPECT_LE((kib("VmHWM:") - before) * 1024, bound) << "rank " << w.rank();
  EXPECT_EQ(recv[n - 1], float(w.size()));
  EXPECT_EQ(send[0], float(w.size()));
}

TEST(Communicator, SplitOrdersByKeyAndSharesStats) {
  Communicator& w = world();
  const int P = w.size(), r = w.rank();
  // Even and odd ranks, reversed by key.
  auto g = w.split(r % 2, -r, "parity", true);
  ASSERT_TRUE(g);
  const int members = (P - r % 2 + 1) / 2;
  EXPECT_EQ(g->size(), members);
  EXPECT_EQ(g->rank(), members - 1 - r / 2);
  EXPECT_EQ(g->name(), "parity");
  EXPECT_TRUE(g->intra_node());
  int32_t sum = r;
  g->all_reduce(&sum, 1, DType::i32);
  int32_t expect = 0;
  for (int q = r % 2; q < P; q += 2) expect += q;
  EXPECT_EQ(sum, expect);
  // Only rank 0 joins; the others get no communicator.
  auto only0 = w.split(r == 0 ? 0 : -1, 0, "zero", true);
  EXPECT_EQ(only0 != nullptr, r == 0);
  // A split's traffic lands in the parent's report.
  w.stats().reset();
  std::vector<float> x(8, 1.0f);
  g->all_reduce(x.data(), x.size(), DType::f32);
  EXPECT_EQ(w.stats().total_bytes(), bus_bytes(CommKind::all_reduce, 32, g->size()));
  EXPECT_EQ(&w.stats(), &g->stats());
}

// The exact bus bytes of each kind: all-reduce 2(P-1)/P of the buffer, reduce-scatter / all-gather /
// all-to-all (P-1)/P of all P blocks, point-to-point the message (counted by the sender), broadcast
// the buffer; 0 for one rank.
TEST(Communicator, StatsCountBusBytesPerKind) {
  Communicator& w = world();
  const uint64_t P = w.size();
  const int r = w.rank();
  const bool single = P == 1;
  auto g = w.split(0, r, "inter", /*intra_node=*/false);  // all ranks, counted as inter-node
  w.stats().reset();
  std::vector<float> buf(4 * 1001 + 64);
  g->all_reduce(buf.data(), 1001, DType::f32);
  EXPECT_EQ(w.stats().bytes(CommKind::all_reduce), 4004 * 2 * (P - 1) / P);
  g->reduce_scatter(buf.data(), buf.data() + 4 * 37, 37, DType::f32);
  EXPECT_EQ(w.stats().bytes(CommKind::reduce_scatter), (P - 1) * 37 * 4);
  // The operator changes no byte: max and min count as sum does.
  g->all_reduce(buf.data(), 1001, DType::f32, ReduceOp::max);
  g->all_reduce_async(buf.data(), 1001, DType::f32, ReduceOp::min)->wait();
  EXPECT_EQ(w.stats().bytes(CommKind::all_reduce), 3 * (4004 * 2 * (P - 1) / P));
  g->reduce_scatter(buf.data(), buf.data() + 4 * 37, 37, DType::f32, ReduceOp::max);
  EXPECT_EQ(w.stats().bytes(CommKind::reduce_scatter), 2 * (P - 1) * 37 * 4);
  w.stats().reset();
  g->all_reduce(buf.data(), 1001, DType::f32);
  EXPECT_EQ(w.stats().bytes(CommKind::all_reduce), 4004 * 2 * (P - 1) / P);
  g->reduce_scatter(buf.data(), buf.data() + 4 * 37, 37, DType::f32);
  EXPECT_EQ(w.stats().bytes(CommKind::reduce_scatter), (P - 1) * 37 * 4);
  std::vector<float> gathered(P * 13);
  g->all_gather(buf.data(), gathered.data(), 13, DType::f32);
  g->all_gather_async(buf.data(), gathered.data(), 13, DType::f32)->wait();
  EXPECT_EQ(w.stats().bytes(CommKind::all_gather), 2 * (P - 1) * 13 * 4);
  std::vector<float> a2a(P * 5);
  g->all_to_all(buf.data(), a2a.data(), 5, DType::f32);
  EXPECT_EQ(w.stats().bytes(CommKind::all_to_all), (P - 1) * 5 * 4);
  g->broadcast(buf.data(), 10, DType::f32, 0);
  EXPECT_EQ(w.stats().bytes(CommKind::broadcast), single ? 0u : 40u);
  // all_to_all_v: what this rank sends to others, self excluded.
  std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
  uint64_t sent = 0;
  for (size_t j = 0; j < P; ++j) {  // rank s sends j + 1 elements to rank j
    sc[j] = j + 1;
    sd[j] = j * (j + 1) / 2;
    rc[j] = r + 1;
    rd[j] = j * (r + 1);
    if (static_cast<int>(j) != r) sent += 4 * (j + 1);
  }
  std::vector<float> vin(P * (P + 1) / 2), vout(P * (r + 1));
  g->all_to_all_v(vin.data(), sc, sd, vout.data(), rc, rd, DType::f32);
  EXPECT_EQ(w.stats().bytes(CommKind::all_to_all), (P - 1) * 5 * 4 + sent);
  // A ring shift: each rank sends 100 floats and receives 100; only the sends count.
  const int next = (r + 1) % static_cast<int>(P), prev = (r + static_cast<int>(P) - 1) % static_cast<int>(P);
  RequestPtr rr = g->recv_async(gathered.data(), 1, DType::f32, prev, 0);
  g->send(buf.data(), 100, DType::f32, next, 1);
  std::vector<float> big(100);
  g->recv(big.data(), 100, DType::f32, prev, 1);
  g->send(buf.data(), 1, DType::f32, next, 0);
  rr->wait();
  EXPECT_EQ(w.stats().bytes(CommKind::send_recv), single ? 0u : 404u);
  // Everything was on the inter-node group.
  EXPECT_EQ(w.stats().bytes(true), 0u);
  EXPECT_EQ(w.stats().bytes(false), w.stats().total_bytes());
  const auto j = w.stats().to_json();
  EXPECT_EQ(j["total_bytes"].get<uint64_t>(), w.stats().total_bytes());
  EXPECT_EQ(j["by_kind"]["all_gather"]["calls"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["by_kind"]["send_recv"]["calls"].get<uint64_t>(), 4u);
  EXPECT_EQ(j["by_kind"]["all_reduce"]["inter_node_bytes"].get<uint64_t>(), 4004 * 2 * (P - 1) / P);
  EXPECT_GT(j["seconds"].get<double>(), 0.0);
}

// Nodes emulated as pairs of ranks: a collective inside a pair is intra-node, one across pairs
// with the same local index is inter-node, and the report keeps them apart.
TEST(Communicator, StatsSplitIntraAndInterNode) {
  Communicator& w = world();
  const int P = w.size(), r = w.rank(), per_node = P >= 2 ? 2 : 1;
  auto intra = w.split(r / per_node, r, "intra_node", true);
  auto inter = w.split(r % per_node, r, "inter_node", P <= per_node);
  w.stats().reset();
  std::vector<float> x(1000, 1.0f);
  intra->all_reduce(x.data(), x.size(), DType::f32);
  inter->all_reduce(x.data(), 500, DType::f32);
  const uint64_t in = bus_bytes(CommKind::all_reduce, 4000, intra->size());
  const uint64_t out = bus_bytes(CommKind::all_reduce, 2000, inter->size());
  if (P == 4) {
    EXPECT_EQ(in, 4000u);  // 2 ranks: 2 * 1/2 of the buffer
    EXPECT_EQ(out, 2000u);
  }
  EXPECT_EQ(w.stats().bytes(true), in + (inter->intra_node() ? out : 0));
  EXPECT_EQ(w.stats().bytes(false), inter->intra_node() ? 0 : out);
  const auto j = w.stats().to_json();
  EXPECT_EQ(j["intra_node_bytes"].get<uint64_t>(), w.stats().bytes(true));
  EXPECT_EQ(j["inter_node_bytes"].get<uint64_t>(), w.stats().bytes(false));
  EXPECT_EQ(x[0], static_cast<float>(P));  // per_node * (P / per_node)
}

TEST(Runtime, WorldAndThreads) {
  Communicator& w = world();
  EXPECT_EQ(w.name(), "world");
  EXPECT_TRUE(w.intra_node());  // the tests run on one host
  const HostLayout h = host_layout(w);
  EXPECT_EQ(h.num_nodes, 1);
  EXPECT_EQ(h.local_size, w.size());
  EXPECT_EQ(h.local_rank, w.rank());
  const int threads = default_threads_per_rank(w);
  EXPECT_GE(threads, 1);
  EXPECT_LE(threads * w.size(),
            std::max<int>(w.size(), static_cast<int>(std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace odyssey
