// The byte model against the engine (planner.md §9.1): each layout of the matrix whose world is this
// run's (np 1, 2, 4) trains two steps of a tiny model, and every rank's second step must have exactly
// the calls and bus bytes the plan predicts, per collective kind and level and per group.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../train/shared_shard_test_util.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/plan/check.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {

struct Layout {
  int world;
  std::vector<std::string> sets;  // --set overrides on top of the tiny run
};

// Every parallelism, ZeRO stage, accumulation, quantized-communication option and memory mode the byte
// model covers, at the world size each needs.
const std::vector<Layout> kMatrix = {
    {1, {"parallel.zero_stage=0"}},
    {1, {"parallel.zero_stage=1", "train.micro_batch=4"}},
    {1, {"parallel.zero_stage=3", "train.micro_batch=4"}},
    {2, {"parallel.zero_stage=0"}},
    {2, {"parallel.zero_stage=0", "train.micro_batch=2"}},
    {2, {"parallel.zero_stage=1"}},
    {2, {"parallel.zero_stage=1", "train.micro_batch=2"}},
    {2, {"parallel.zero_stage=2"}},
    {2, {"parallel.zero_stage=2", "train.micro_batch=2"}},
    {2, {"parallel.zero_stage=3"}},
    {2, {"parallel.zero_stage=3", "train.micro_batch=2"}},
    {2, {"parallel.zero_stage=1", "comm.weights=qwd"}},
    {2, {"parallel.zero_stage=2", "comm.weights=int8", "comm.grads=int4"}},
    {2, {"parallel.zero_stage=3", "comm.weights=int4", "comm.grads=int8"}},
    {2, {"parallel.zero_stage=1", "comm.grads=qgz"}},
    {2, {"parallel.zero_stage=2", "parallel.ranks_per_node=1", "comm.grads=tlq"}},
    {2, {"parallel.zero_stage=1", "parallel.ranks_per_node=1", "comm.grads=tlq_hs", "comm.grad_pipeline=4"}},
    {2, {"parallel.zero_stage=3", "parallel.ranks_per_node=1", "comm.hpz=true"}},
    {2, {"parallel.sp_ulysses=2"}},
    {2, {"parallel.sp_ring=2"}},
    {2, {"parallel.sp_ring=2", "parallel.sp_ring_layout=contiguous", "parallel.zero_stage=2"}},
    {2, {"parallel.sp_ring=2", "memory.checkpoint=full"}},
    {2, {"parallel.sp_ulysses=2", "memory.checkpoint=full", "parallel.zero_stage=3"}},
    {4, {"parallel.zero_stage=0", "train.micro_batch=1"}},
    {4, {"parallel.zero_stage=2", "train.micro_batch=1"}},
    {4, {"parallel.zero_stage=3"}},
    {4, {"parallel.zero_stage=1", "parallel.ranks_per_node=2", "comm.grads=qgz", "comm.weights=int8"}},
    {4, {"parallel.zero_stage=2", "parallel.ranks_per_node=2", "comm.grads=tlq_hs", "comm.grad_pipeline=4"}},
    {4, {"parallel.zero_stage=1", "parallel.ranks_per_node=2", "comm.grads=tlq", "comm.weights=qwd"}},
    {4, {"parallel.zero_stage=3", "parallel.ranks_per_node=2", "comm.hpz=true", "comm.weights=int8"}},
    {4, {"parallel.sp_ulysses=4"}},
    {4, {"parallel.sp_ring=4", "parallel.zero_stage=1"}},
    {4, {"parallel.sp_ulysses=2", "parallel.sp_ring=2"}},
    {4, {"parallel.sp_ulysses=2", "parallel.sp_ring=2", "memory.checkpoint=full", "parallel.zero_stage=2"}},
    {4, {"parallel.sp_ulysses=2", "parallel.zero_stage=3", "parallel.ranks_per_node=2"}},
    {4, {"parallel.sp_ring=2", "parallel.zero_stage=1", "parallel.ranks_per_node=2", "comm.grads=int4"}},
    // Tensor parallelism: plain and Megatron-SP, Domino, row chunks, recompute, a chunked LM head,
    // Llama's GQA with replicated key/value heads (tp > n_kv_head).
    {2, {"parallel.tp=2", "parallel.tp_sp=false"}},
    {2, {"parallel.tp=2", "parallel.zero_stage=1", "train.micro_batch=4"}},
    {2, {"parallel.tp=2", "parallel.zero_stage=3", "train.micro_batch=6", "memory.checkpoint=full"}},
    {2, {"parallel.tp=2", "parallel.zero_stage=2", "parallel.tp_overlap=domino"}},
    {2,
     {"parallel.tp=2", "memory.checkpoint=keep_attention", "memory.chunk_tokens=128",
      "memory.head_chunk_tokens=64"}},
    {2, {"parallel.tp=2", "parallel.tp_sp=false", "memory.checkpoint=full", "memory.chunk_tokens=100"}},
    {4, {"parallel.tp=4", "model.arch=llama", "model.n_kv_head=2", "model.d_ff=64", "parallel.zero_stage=2"}},
    {4, {"parallel.tp=4", "model.arch=llama", "model.n_kv_head=2", "model.d_ff=64", "parallel.tp_sp=false"}},
    {4, {"parallel.tp=2", "parallel.zero_stage=1", "parallel.ranks_per_node=2", "comm.weights=int8"}},
    {4, {"parallel.tp=2", "parallel.sp_ulysses=2"}},
    {4, {"parallel.tp=2", "parallel.sp_ring=2", "memory.checkpoint=full", "parallel.zero_stage=1"}},
    // Pipeline parallelism: 1F1B, GPipe, zb1, interleaved; the tied embedding's sum; ZeRO 0-3 beside it.
    {2, {"parallel.pp=2", "train.micro_batch=3"}},
    {2, {"parallel.pp=2", "train.micro_batch=2", "parallel.zero_stage=1", "parallel.pp_schedule=zb1"}},
    {2, {"parallel.pp=2", "train.micro_batch=3", "parallel.zero_stage=3"}},
    {2, {"parallel.pp=2", "train.micro_batch=3", "parallel.zero_stage=1", "parallel.pp_schedule=gpipe"}},
    {2,
     {"parallel.pp=2", "parallel.pp_virtual=2", "parallel.pp_schedule=interleaved", "model.n_layer=4",
      "train.micro_batch=3", "parallel.zero_stage=1"}},
    {2, {"parallel.pp=2", "model.arch=llama", "model.n_kv_head=2", "model.d_ff=64", "train.micro_batch=4"}},
    {4, {"parallel.pp=2", "parallel.zero_stage=3", "train.micro_batch=3", "parallel.ranks_per_node=2"}},
    {4, {"parallel.pp=4", "model.n_layer=4", "train.micro_batch=2", "parallel.pp_schedule=zb1"}},
    {4,
     {"parallel.pp=2", "parallel.pp_virtual=2", "parallel.pp_schedule=interleaved", "model.n_layer=4",
      "train.micro_batch=3", "parallel.zero_stage=2"}},
    {4, {"parallel.pp=2", "parallel.sp_ring=2", "train.micro_batch=4"}},
    // Both, with ZeRO.
    {4, {"parallel.tp=2", "parallel.pp=2", "train.micro_batch=4", "parallel.zero_stage=1"}},
    {4, {"parallel.tp=2", "parallel.pp=2", "parallel.zero_stage=3", "train.micro_batch=6"}},
    {4,
     {"parallel.tp=2", "parallel.tp_overlap=domino", "parallel.zero_stage=1", "parallel.ranks_per_node=2",
      "memory.checkpoint=cheap"}},
};

std::string tiny_toml(const std::string& data) {
  return "[model]\nn_layer = 2\nn_head = 4\nd_model = 32\nseq_len = 32\nvocab_size = 67\n"
         "[data]\ntrain = \"" +
         data +
         "/train.bin\"\n"
         "[train]\nglobal_batch = 12\nmicro_batch = 12\nthreads = 1\ngemm_gflops = 1\n"
         "[parallel]\nbucket_mb = 0.01\n";
}

class PlanCheck : public ::testing::TestWithParam<size_t> {};

TEST_P(PlanCheck, BytesAndCallsEqualTheEngines) {
  const Layout& l = kMatrix[GetParam()];
  Communicator& w = world();
  if (l.world != w.size()) GTEST_SKIP() << "a layout for " << l.world << " ranks";
  const std::string data = shared_token_shard_dir(w, "odyssey_plan_data_");
  // dp fills the world; without a train.micro_batch the accumulation is 1.
  RunConfig config = parse_run_config(tiny_toml(data), "plan check", l.sets);
  const ParallelConfig& p = config.parallel;
  const int dp = w.size() / (p.tp * p.pp * p.sp_ulysses * p.sp_ring);
  bool micro_given = false;
  for (const std::string& s : l.sets) micro_given |= s.rfind("train.micro_batch=", 0) == 0;
  if (!micro_given) config.train.micro_batch = config.train.global_batch / dp;
  const nlohmann::json report = check_layout(config, w);
  if (w.rank() == 0) fs::remove_all(data);
  for (const auto& m : report["mismatches"])
    ADD_FAILURE() << "rank " << w.rank() << ": " << m.get<std::string>();
  EXPECT_GT(report["measured"].value("by_group", nlohmann::json::object()).size(), 0u);
  EXPECT_GT(report["calls"].get<size_t>(), 0u);  // the trace was on
}

INSTANTIATE_TEST_SUITE_P(Matrix, PlanCheck, ::testing::Range<size_t>(0, kMatrix.size()));

}  // namespace
