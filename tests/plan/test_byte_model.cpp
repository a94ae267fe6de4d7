// The byte model's published shapes that need no engine run (planner.md §9.1, §9.4): ZeRO's closed
// forms and their ratios, Ulysses' constant volume, the two-level gradient formats' bytes per element.
#include <gtest/gtest.h>

#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/check.h"
#include "odyssey/plan/layout.h"
#include "odyssey/plan/plan.h"
#include "odyssey/plan/search.h"

using namespace odyssey;

namespace {

RunConfig gpt2_small(int dp, int zero, const char* precision = "fp32") {
  RunConfig c = parse_run_config(
      "[model]\nn_layer = 12\nn_head = 12\nd_model = 768\nseq_len = 1024\nvocab_size = 50304\n"
      "[train]\nglobal_batch = 8\nmicro_batch = 1\n",
      "test", {});
  c.parallel.dp = dp;
  c.parallel.zero_stage = zero;
  c.parallel.bucket_mb = 25;
  c.train.global_batch = dp;
  c.train.precision = std::string(precision) == "bf16" ? Precision::bf16 : Precision::fp32;
  return c;
}

// Gradient and weight bus bytes of a step (scalars left out).
uint64_t model_state_bytes(const RunConfig& c, int world) {
  const PlanLayout layout(c, world, world);
  uint64_t bytes = 0;
  for (const CommRecord& r : comm_schedule(layout, 0))
    if (r.purpose != CommPurpose::scalars) bytes += r.bus_bytes;
  return bytes;
}

TEST(ByteModel, ZeroClosedFormsPerParameter) {
  // No padding at P = 2 (every unit of this model has an even size): Ψ_pad = Ψ, bus = (P-1)/P of it.
  const double psi = 124475904;  // GPT-2 small with a 50,304-token vocabulary
  const int P = 2;
  for (int zero : {0, 1, 2})
    EXPECT_EQ(model_state_bytes(gpt2_small(P, zero), P), uint64_t(2 * psi * 4 / 2)) << zero;
  EXPECT_EQ(model_state_bytes(gpt2_small(P, 3), P), uint64_t(3 * psi * 4 / 2));
}

TEST(ByteModel, ZeroThreeOverOneIsOneAndAHalfInFp32AndFourThirdsInBf16) {
  const int P = 2;
  EXPECT_DOUBLE_EQ(
      double(model_state_bytes(gpt2_small(P, 3), P)) / double(model_state_bytes(gpt2_small(P, 1), P)), 1.5);
  // bf16 weights (2 bytes) and fp32 gradients (4): (2 + 2 + 4) / (2 + 4).
  EXPECT_DOUBLE_EQ(double(model_state_bytes(gpt2_small(P, 3, "bf16"), P)) /
                       double(model_state_bytes(gpt2_small(P, 1, "bf16"), P)),
                   8.0 / 6.0);
}

TEST(ByteModel, AccumulationMultipliesZeroTwoAndThreeOnly) {
  const int P = 2;
  for (int zero : {0, 1, 2, 3}) {
    RunConfig one = gpt2_small(P, zero), three = gpt2_small(P, zero);
    three.train.global_batch = 3 * P;
    const uint64_t a = model_state_bytes(one, P), b = model_state_bytes(three, P);
    const uint64_t grads = zero == 3 ? a / 3 : a / 2;  // one reduction round
    const uint64_t expected = zero <= 1 ? a : zero == 2 ? a + 2 * grads : 3 * a;
    EXPECT_EQ(b, expected) << zero;
  }
}

TEST(ByteModel, UlyssesVolumePerRankIsConstantWhenTokensAndRanksGrowTogether) {
  // Per layer forward + backward: the q,k,v and output all-to-alls move (2h + 2h_kv) x tokens/U x 4
  // bytes of each rank's buffer; with T = 512 U that is the same for every U: the README's measured
  // 8,388,608 bytes per layer forward at h = 1024.
  double volume = 0;
  for (int U : {2, 4, 8}) {
    RunConfig c = gpt2_small(1, 0);
    c.model.d_model = 1024;
    c.model.n_head = 16;
    c.model.seq_len = 512 * U;
    c.parallel.sp_ulysses = U;
    c.memory.chunk_tokens = 0;
    const PlanLayout layout(c, U, U);
    uint64_t bus = 0;
    for (const CommRecord& r : comm_schedule(layout, 0))
      if (r.purpose == CommPurpose::sp) bus += r.bus_bytes;
    const double v = double(bus) * U / (U - 1) / c.model.n_layer;
    if (volume == 0) volume = v;
    EXPECT_EQ(v, volume) << U;
  }
  EXPECT_EQ(volume, 2 * 8388608.0);
}

TEST(ByteModel, TwoLevelGradientsMoveTheWireFormatsBytesPerElement) {
  // 4 ranks as 2 nodes x 2, ZeRO-1, tlq: per element of the bucket, int8 groups of 128 intra-node
  // (1 + 4/128 bytes) and int4 groups of 128 on 1/D of the buffer inter-node (0.5 + 4/128).
  RunConfig c = gpt2_small(4, 1);
  c.comm.grads = GradComm::tlq;
  c.parallel.ranks_per_node = 2;
  const PlanLayout layout(c, 4, 2);
  uint64_t intra = 0, inter = 0, elements = 0;
  for (const CommRecord& r : comm_schedule(layout, 0)) {
    if (r.purpose != CommPurpose::grads) continue;
    (r.group == "dp_sp_intra" ? intra : inter) += r.count * r.group_size;  // the rank's whole buffer
  }
  for (const CommRecord& r : comm_schedule(layout, 0))
    if (r.purpose == CommPurpose::weights) elements += r.count * 4;  // the fp32 gather: P x S padded elements
  EXPECT_NEAR(double(intra) / double(elements), 1.03125, 2e-4);
  EXPECT_NEAR(double(inter) / double(elements / 2), 0.53125, 2e-4);
}

// Megatron's per-layer volume (planner.md 5.3): plain TP all-reduces b T C floats twice forward and twice
// backward, 8 (t - 1)/t b T C e per layer per micro-batch; TP-SP moves the same forward and, as the engine
// gathers each column linear's input again in backward, 10 (t - 1)/t b T C e in all.
TEST(ByteModel, TensorParallelLayerVolume) {
  for (bool sp : {false, true}) {
    RunConfig c = gpt2_small(1, 1);
    c.parallel.tp = 4;
    c.parallel.tp_sp = sp;
    c.train.global_batch = 2;
    c.train.micro_batch = 1;
    const PlanLayout layout(c, 4, 4);
    ASSERT_TRUE(byte_model_gap(layout).empty());
    uint64_t per_layer = 0;
    for (const CommRecord& r : comm_schedule(layout, 0))
      if (r.purpose == CommPurpose::tp && r.what == "layer 3" && r.micro == 0) per_layer += r.bus_bytes;
    const uint64_t bTC4 = uint64_t(c.seq_len()) * uint64_t(c.model.d_model) * 4;
    EXPECT_EQ(per_layer, (sp ? 10 : 8) * 3 * bTC4 / 4) << "tp_sp " << sp;
  }
}

// The trace comparison finds a missing, an extra and a resized call (--check's record-by-record test).
TEST(ByteModel, TraceComparisonNamesTheFirstDifference) {
  RunConfig c = gpt2_small(2, 2);
  const PlanLayout layout(c, 2, 2);
  const std::vector<CommRecord> plan = comm_schedule(layout, 0);
  nlohmann::json trace = nlohmann::json::array();
  for (const CommRecord& r : plan)
    for (uint64_t k = 0; k < r.repeat; ++k)
      trace.push_back({{"group", r.group},
                       {"kind", comm_kind_name(r.kind)},
                       {"level", r.intra ? "intra" : "inter"},
                       {"count", r.count},
                       {"dtype", r.dtype},
                       {"bus_bytes", r.bus_bytes}});
  EXPECT_TRUE(compare_trace(plan, trace).empty());
  nlohmann::json fewer = trace;
  fewer.erase(fewer.begin());
  ASSERT_EQ(compare_trace(plan, fewer).size(), 1u);
  EXPECT_NE(compare_trace(plan, fewer)[0].find("not in the engine's trace"), std::string::npos);
  nlohmann::json more = trace;
  more.push_back(trace.back());
  ASSERT_EQ(compare_trace(plan, more).size(), 1u);
  EXPECT_NE(compare_trace(plan, more)[0].find("the plan lacks"), std::string::npos);
  nlohmann::json resized = trace;
  resized[0]["bus_bytes"] = resized[0]["bus_bytes"].get<uint64_t>() + 4;
  EXPECT_EQ(compare_trace(plan, resized).size(), 2u);
}

// The search ranks by the slowest rank's step time alone and builds full plans only for what it reports:
// with every fitting layout reported, each one's full plan (made from scratch) has the step time it was
// ranked by, and the list is in that order.
TEST(Search, RanksByTheFullPlansStepTime) {
  RunConfig c = gpt2_small(1, 0);
  c.train.global_batch = 8;
  c.parallel.dp = 0;
  const Cluster cluster =
      load_cluster(std::string(ODYSSEY_TEST_DATA) + "/../../configs/clusters/sdp4bit-a100.toml");
  SearchOptions o;
  o.world = 4;
  o.top = 1 << 20;
  o.max_micro_batches = 1;
  const nlohmann::json r = search_layouts(c, cluster, o);
  ASSERT_GT(r["top"].size(), 10u);
  ASSERT_EQ(r["top"].size(), r["fits"].get<size_t>());
  double previous = 0;
  for (const auto& p : r["top"]) {
    const auto& l = p["layout"];
    RunConfig x = c;
    x.parallel.dp = l["dp"], x.parallel.tp = l["tp"], x.parallel.pp = l["pp"];
    x.parallel.sp_ulysses = l["sp_ulysses"], x.parallel.sp_ring = l["sp_ring"];
    x.parallel.zero_stage = l["zero_stage"], x.train.micro_batch = l["micro_batch"];
    x.memory.checkpoint =
        parse_enum(kCheckpointPolicyNames, l["checkpoint"].get<std::string>(), "checkpoint");
    x.comm.weights = parse_enum(kWeightCommNames, l["comm_weights"].get<std::string>(), "weights");
    x.comm.grads = parse_enum(kGradCommNames, l["comm_grads"].get<std::string>(), "grads");
    x.comm.hpz = l["hpz"], x.comm.grad_pipeline = l["grad_pipeline"];
    const nlohmann::json fresh = plan_layout(PlanLayout(x, 4, cluster.devices_per_node), cluster);
    const double step = p["time"]["step_s"].get<double>();
    EXPECT_EQ(fresh["time"]["step_s"].get<double>(), step);
    EXPECT_GE(step, previous);
    previous = step;
  }
}

}  // namespace
