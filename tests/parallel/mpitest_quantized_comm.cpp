// Compressed collectives in the ZeRO engine (comm.weights / comm.grads / comm.hpz), run at np 1, 2, 4
// with the ranks split into two emulated nodes where there are at least two:
//   - with every format switched to identity (fp32 through the same partitions, swizzles and sums) each
//     path reproduces the uncompressed run to fp32 summation order;
//   - under qWD with real 4-bit quantization every rank holds bitwise the same model weights;
//   - the bytes measured from CommStats are the ones the spec derives (qWD ≤ 1/4 of the baseline weight
//     gather; TLq-HS 1.03 B/element intra, 0.53 inter);
//   - with real quantization the losses stay close to the baseline (a loose bound: tiny model, 10 steps);
//   - bad combinations are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "zero_test_util.h"

using namespace odyssey;
using namespace odyssey::testing_zero;

namespace {

constexpr int kSteps = 10;

struct Mode {
  const char* name;
  int stage;
  const char* weights;
  const char* grads;
  bool hpz;
};

// Two emulated nodes where there are two ranks or more.
int ranks_per_node(int P) {
  return P >= 2 ? P / 2 : 1;
}

struct RunOut {
  std::vector<double> losses;
  std::vector<float> params;     // master weights, full (rank 0)
  std::vector<uint64_t> hashes;  // every rank's model-weight hash after the last step
  CommTraffic traffic;           // last step
  int64_t padded_total = 0, num_params = 0;
};

uint64_t fnv1a(std::span<const float> v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// train_zero with comm options, over a grid whose dp group knows the emulated nodes.
RunOut run(const Mode& mode, bool identity, int micro_batch, double bucket_mb = 0.03, int grad_pipeline = 1) {
  Communicator& w = world();
  ProcessGrid grid(w, GridDims{1, 1, 1, 0, 1, ranks_per_node(w.size())});
  Communicator& dp = grid.dp();
  ZeroOptions o;
  o.stage = mode.stage;
  o.bucket_mb = bucket_mb;
  o.comm.weights = parse_enum(kWeightCommNames, mode.weights, "comm.weights");
  o.comm.grads = parse_enum(kGradCommNames, mode.grads, "comm.grads");
  o.comm.hpz = mode.hpz;
  o.comm.ranks_per_node = ranks_per_node(w.size());
  o.comm.identity = identity;
  o.comm.seed = kSeed;
  o.comm.grad_pipeline = grad_pipeline;

  const ModelConfig c = tiny_config();
  GPT2 model(c, false);
  ZeroEngine engine(model, dp, o, optimizer());
  const size_t P = size_t(model.num_params());
  load_initial(model, engine);
  RunResult steps;
  run_steps(model, engine, dp, kSteps, micro_batch, steps);
  RunOut r;
  r.losses = steps.losses;
  r.traffic = engine.traffic();
  r.padded_total = engine.partition().padded_total();
  r.num_params = int64_t(P);
  uint64_t h = fnv1a(engine.model_weights());
  r.hashes.resize(size_t(dp.size()));
  dp.all_gather(&h, r.hashes.data(), sizeof(h), DType::u8);
  r.params.assign(P, 0.0f);
  engine.gather_params_to_root(r.params.data());
  return r;
}

bool needs_two_nodes(const Mode& m) {
  return std::string(m.grads) == "tlq" || std::string(m.grads) == "tlq_hs";
}

const Mode kModes[] = {
    {"qwd_zero1", 1, "qwd", "none", false},     {"qwd_tlq_hs_zero2", 2, "qwd", "tlq_hs", false},
    {"tlq_zero1", 1, "none", "tlq", false},     {"int4w_int8g_zero1", 1, "int4", "int8", false},
    {"int4g_zero2", 2, "none", "int4", false},  {"tlq_hs_zero3", 3, "none", "tlq_hs", false},
    {"qwz_qgz_zero3", 3, "int8", "qgz", false}, {"qwz_hpz_qgz_zero3", 3, "int8", "qgz", true},
    {"hpz_zero3", 3, "none", "none", true},
};

class QuantizedComm : public ::testing::TestWithParam<Mode> {};

TEST_P(QuantizedComm, IdentityFormatReproducesUncompressedRun) {
  const Mode m = GetParam();
  if (needs_two_nodes(m) && world().size() < 2) GTEST_SKIP() << "two-level gradients need two nodes";
  const Mode base{"base", m.stage, "none", "none", false};
  for (int micro_batch : {1, kGlobalBatch / world().size()}) {
    const RunOut want = run(base, false, micro_batch);
    const RunOut got = run(m, true, micro_batch);
    for (size_t s = 0; s < want.losses.size(); ++s)
      EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s]))
          << "step " << s + 1 << " micro_batch " << micro_batch;
    if (world().rank() != 0) continue;
    double worst = 0;
    for (size_t i = 0; i < want.params.size(); ++i)
      worst = std::max(worst, std::abs(double(got.params[i]) - double(want.params[i])));
    EXPECT_LE(worst, 1e-5) << "micro_batch " << micro_batch;
    std::printf("  %s identity, micro_batch %d: parameters within %.1e of the uncompressed run\n", m.name,
                micro_batch, worst);
  }
}

TEST_P(QuantizedComm, RealQuantizationStaysCloseAndReplicasIdentical) {
  const Mode m = GetParam();
  if (needs_two_nodes(m) && world().size() < 2) GTEST_SKIP() << "two-level gradients need two nodes";
  const RunOut base = run({"base", m.stage, "none", "none", false}, false, 1);
  const RunOut got = run(m, false, 1);
  double worst = 0;
  for (size_t s = 0; s < base.losses.size(); ++s)
    worst = std::max(worst, std::abs(got.losses[s] / base.losses[s] - 1));
  EXPECT_LE(worst, 0.01) << "losses drift from the baseline";
  // Replicated weights (stages 1-2): every rank's model copy is bitwise the same.
  if (m.stage < 3) {
    for (uint64_t h : got.hashes) EXPECT_EQ(h, got.hashes[0]) << "model weights differ across ranks";
  }
  if (world().rank() == 0)
    std::printf("  %s: final loss %.5f vs baseline %.5f (worst step %.2e relative)\n", m.name,
                got.losses.back(), base.losses.back(), worst);
}

INSTANTIATE_TEST_SUITE_P(Modes, QuantizedComm, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

// comm.grad_pipeline slices the two-level reduce-scatter on whole groups: training is bitwise the same.
TEST(QuantizedCommPipeline, SlicesChangeNoBit) {
  if (world().size() < 2) GTEST_SKIP() << "two-level gradients need two nodes";
  for (const Mode& m : {Mode{"qwd_tlq_hs_zero2", 2, "qwd", "tlq_hs", false}}) {
    const RunOut one = run(m, false, 2, 0.03, 1);
    const RunOut four = run(m, false, 2, 0.03, 4);
    ASSERT_EQ(one.losses.size(), four.losses.size());
    for (size_t i = 0; i < one.losses.size(); ++i)
      EXPECT_EQ(one.losses[i], four.losses[i]) << m.name << " step " << i;
    EXPECT_EQ(one.hashes, four.hashes) << m.name;
    EXPECT_EQ(one.traffic.grads_inter, four.traffic.grads_inter) << m.name;
    EXPECT_EQ(one.traffic.grads_intra, four.traffic.grads_intra) << m.name;
  }
}

// One bucket, so the bytes are those of whole shards (a group per 128 or 2048 elements, only the
// shard's last group short).
TEST(QuantizedCommBytes, MatchTheSpec) {
  const int P = world().size();
  if (P < 4) GTEST_SKIP() << "needs 2 nodes x 2 ranks";
  const int D = ranks_per_node(P), N = P / D;
  const RunOut base = run({"base", 1, "none", "none", false}, false, 1, 100);
  const RunOut sdp = run({"sdp4bit", 1, "qwd", "tlq_hs", false}, false, 1, 100);
  const double psi = double(sdp.padded_total), S = psi / P;
  auto groups = [&](double g) { return std::ceil(S / g); };

  const double base_w = double(base.traffic.weights_intra + base.traffic.weights_inter);
  const double sdp_w = double(sdp.traffic.weights_intra + sdp.traffic.weights_inter);
  EXPECT_LE(sdp_w, base_w / 4);  // fp32 baseline: about 1/8; a bf16 one would be about 1/4
  EXPECT_EQ(sdp_w, (P - 1) * (S / 2 + 4 * groups(2048)));

  // Per element of the bucket: intra (D-1)/D · (1 + 4/128), inter (N-1)/N · (0.5 + 4/128) / D.
  const double intra = double(sdp.traffic.grads_intra), inter = double(sdp.traffic.grads_inter);
  EXPECT_EQ(intra, double(D - 1) * N * (S + 4 * groups(128)));
  EXPECT_EQ(inter, double(N - 1) * (S / 2 + 4 * groups(128)));
  const double intra_per = intra / ((D - 1.0) / D * psi), inter_per = inter / ((N - 1.0) / N * psi / D);
  EXPECT_NEAR(intra_per, 1.03125, 0.01);
  EXPECT_NEAR(inter_per, 0.53125, 0.01);
  const double base_g = double(base.traffic.grads_intra + base.traffic.grads_inter);
  if (world().rank() == 0)
    std::printf(
        "  bytes per step per rank (Psi_pad = %.0f): weights %.0f -> %.0f (%.3fx); grads %.0f (fp32 RS) -> "
        "%.0f intra + %.0f inter; per element: intra %.4f (spec 1.03125), inter %.4f (spec 0.53125)\n",
        psi, base_w, sdp_w, sdp_w / base_w, base_g, intra, inter, intra_per, inter_per);
}

TEST(QuantizedCommConfig, BadCombinationsAreRefused) {
  auto message = [](const CommOptions& c, int stage, int dp) {
    try {
      validate_comm(c, stage, dp);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CommOptions qwd;
  qwd.weights = WeightComm::qwd;
  EXPECT_NE(message(qwd, 3, 4).find("ZeRO-3"), std::string::npos);
  CommOptions tlq;
  tlq.grads = GradComm::tlq_hs;
  tlq.ranks_per_node = 4;
  EXPECT_NE(message(tlq, 2, 4).find("more than one node"), std::string::npos);
  tlq.ranks_per_node = 2;
  EXPECT_EQ(message(tlq, 2, 4), "");
  CommOptions hpz;
  hpz.hpz = true;
  EXPECT_NE(message(hpz, 2, 4).find("zero_stage 3"), std::string::npos);
  CommOptions grads0;
  grads0.grads = GradComm::int8;
  EXPECT_NE(message(grads0, 0, 4).find("ZeRO-0"), std::string::npos);
  CommOptions piped = tlq;
  piped.grad_pipeline = 0;
  EXPECT_NE(message(piped, 2, 4).find("comm.grad_pipeline must be in 1..64"), std::string::npos);
  piped.grad_pipeline = 8;
  EXPECT_EQ(message(piped, 2, 4), "");
  piped.grads = GradComm::int8;
  EXPECT_NE(message(piped, 2, 4).find("no second hop"), std::string::npos);
  try {
    parse_enum(kWeightCommNames, "fp8", "comm.weights");
    ADD_FAILURE() << "comm.weights=fp8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comm.weights: unknown value 'fp8' (none, int8, int4, qwd)"),
              std::string::npos)
        << e.what();
  }
  // The engine refuses too, before any collective.
  GPT2 model(tiny_config(), false);
  ZeroOptions o;
  o.stage = 3;
  o.comm = qwd;
  EXPECT_THROW(ZeroEngine(model, world(), o, optimizer()), Error);
}

}  // namespace
