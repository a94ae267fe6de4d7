// ZeRO's collectives on a communication thread (ZeroOptions::comm_thread) run the same operations in
// the same order on the same buffers as on the main thread, so every number is the same bit for bit:
// losses, gradient norms, the final master parameters, every rank's model weights and the bytes
// accounted. Stages 0-3 with several buckets and gradient accumulation, one bucket per unit with one
// reduction in flight, and the compressed paths (qWD, TLq-HS, int4 gradients, qwZ + hpZ + qgZ) with
// real quantization, and bf16 (its model copy; stages 1-2 leave the bf16 after-update gather in flight
// into the next step, as fp32 does); at np 2 and 4 (np 1 has no dp group: both runs are the main-thread one),
// the ranks split into two emulated nodes for the two-level paths. Times are reported, never asserted.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "zero_test_util.h"

using namespace odyssey;
using namespace odyssey::testing_zero;

namespace {

constexpr int kSteps = 5;

struct Mode {
  const char* name;
  int stage;
  double bucket_mb;
  int max_in_flight;
  bool accumulate;  // two micro-steps per rank, else one
  const char* weights = "none";
  const char* grads = "none";
  bool hpz = false;
  bool bf16 = false;  // train.precision = bf16: a bf16 model copy, gathered as bf16
};

struct RunOut {
  RunResult steps;
  std::vector<uint64_t> hashes;  // every rank's model-weight hash
  CommTraffic traffic;           // last step
  ExposedComm exposed;           // the whole run's
};

uint64_t fnv1a(std::span<const float> v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int ranks_per_node(int P) {
  return P >= 2 ? P / 2 : 1;
}

RunOut run(const Mode& mode, bool thread) {
  Communicator& w = world();
  ProcessGrid grid(w, GridDims{1, 1, 1, 0, 1, ranks_per_node(w.size())});
  Communicator& dp = grid.dp();
  ZeroOptions o;
  o.stage = mode.stage;
  o.bucket_mb = mode.bucket_mb;
  o.max_in_flight = mode.max_in_flight;
  o.comm_thread = thread;
  o.comm.weights = parse_enum(kWeightCommNames, mode.weights, "comm.weights");
  o.comm.grads = parse_enum(kGradCommNames, mode.grads, "comm.grads");
  o.comm.hpz = mode.hpz;
  o.bf16 = mode.bf16;
  o.comm.ranks_per_node = ranks_per_node(w.size());
  o.comm.seed = kSeed;
  const ModelConfig c = tiny_config();
  GPT2 model(c, false);
  ZeroEngine engine(model, dp, o, optimizer());
  EXPECT_EQ(engine.comm_thread(), thread && dp.size() > 1);
  load_initial(model, engine);
  RunOut r;
  run_steps(model, engine, dp, kSteps, kGlobalBatch / ((mode.accumulate ? 2 : 1) * dp.size()), r.steps);
  r.traffic = engine.traffic();
  r.exposed = engine.take_exposed_comm();
  uint64_t h = fnv1a(engine.model_weights());
  r.hashes.resize(size_t(dp.size()));
  dp.all_gather(&h, r.hashes.data(), sizeof(h), DType::u8);
  r.steps.params.assign(size_t(model.num_params()), 0.0f);
  engine.gather_params_to_root(r.steps.params.data());
  return r;
}

const Mode kModes[] = {
    {"zero0_buckets", 0, 0.03, 2, true},
    {"zero1_buckets", 1, 0.03, 2, true},
    {"zero2_buckets", 2, 0.03, 2, true},
    {"zero3_units", 3, 0, 2, true},
    {"zero1_unit_buckets_one_in_flight", 1, 0, 1, false},
    {"zero2_unit_buckets_one_in_flight", 2, 0, 1, false},
    {"zero3_one_in_flight", 3, 0, 1, false},
    {"qwd_tlq_hs_zero2", 2, 0.03, 2, true, "qwd", "tlq_hs"},
    {"int4w_int4g_zero1", 1, 0.03, 2, true, "int4", "int4"},
    {"zeropp_int4_qwz_hpz_qgz_zero3", 3, 0, 2, true, "int4", "qgz", true},
    {"hpz_zero3", 3, 0, 2, true, "none", "none", true},
    {"bf16_zero0_buckets", 0, 0.03, 2, true, "none", "none", false, true},
    {"bf16_zero1_buckets", 1, 0.03, 2, true, "none", "none", false, true},
    {"bf16_zero2_unit_buckets_one_in_flight", 2, 0, 1, false, "none", "none", false, true},
    {"bf16_zero3_units", 3, 0, 2, true, "none", "none", false, true},
};

class ZeroOverlap : public ::testing::TestWithParam<Mode> {};

TEST_P(ZeroOverlap, ThreadGivesTheMainThreadRunBitForBit) {
  const Mode m = GetParam();
  const bool two_level = std::string(m.grads) == "tlq_hs" || std::string(m.grads) == "qgz" || m.hpz;
  if (two_level && world().size() < 2) GTEST_SKIP() << "two-level paths need two nodes";
  if (world().size() > 1 && !runtime_thread_multiple()) GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE";
  const RunOut want = run(m, false);
  const RunOut got = run(m, true);
  ASSERT_EQ(got.steps.losses.size(), want.steps.losses.size());
  for (size_t s = 0; s < want.steps.losses.size(); ++s) {
    EXPECT_EQ(got.steps.losses[s], want.steps.losses[s]) << "step " << s + 1;
    EXPECT_EQ(got.steps.norms[s], want.steps.norms[s]) << "step " << s + 1;
  }
  EXPECT_EQ(got.hashes, want.hashes);
  EXPECT_EQ(got.traffic.weights_intra, want.traffic.weights_intra);
  EXPECT_EQ(got.traffic.weights_inter, want.traffic.weights_inter);
  EXPECT_EQ(got.traffic.grads_intra, want.traffic.grads_intra);
  EXPECT_EQ(got.traffic.grads_inter, want.traffic.grads_inter);
  EXPECT_EQ(got.exposed.threaded, world().size() > 1);
  EXPECT_FALSE(want.exposed.threaded);
  if (world().rank() != 0) return;
  ASSERT_EQ(got.steps.params.size(), want.steps.params.size());
  EXPECT_EQ(0, std::memcmp(got.steps.params.data(), want.steps.params.data(),
                           got.steps.params.size() * sizeof(float)));
  std::printf(
      "  %s: exposed %.1f ms on the main thread, %.1f ms with the thread (of %.1f ms, hidden %.0f%%)\n",
      m.name, want.exposed.exposed_seconds * 1e3, got.exposed.exposed_seconds * 1e3,
      got.exposed.comm_seconds * 1e3, 100 * got.exposed.hidden_fraction());
}

INSTANTIATE_TEST_SUITE_P(Modes, ZeroOverlap, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
