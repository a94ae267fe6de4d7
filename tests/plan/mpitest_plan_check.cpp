// The byte model against the engine (planner.md §9.1): each layout of the matrix whose world is this
// run's (np 1, 2, 4) trains two steps of a tiny model, and every rank's second step must have exactly
// the calls and bus bytes the plan predicts, per collective kind and level and per group.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/data/token_shard.h"
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
};

// A directory every rank agrees on (rank 0 picks it), with one synthetic token shard.
std::string shared_data(Communicator& world) {
  int32_t id = world.rank() == 0 ? int32_t(::getpid()) : 0;
  world.broadcast(&id, 1, DType::i32, 0);
  const std::string dir = (fs::temp_directory_path() / ("odyssey_plan_data_" + std::to_string(id))).string();
  if (world.rank() == 0) {
    fs::create_directories(dir);
    std::vector<uint16_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t((i * 7919 + i / 13) % 67);
    write_token_shard(dir + "/train.bin", tokens);
  }
  world.barrier();
  return dir;
}

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
  const std::string data = shared_data(w);
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
}

INSTANTIATE_TEST_SUITE_P(Matrix, PlanCheck, ::testing::Range<size_t>(0, kMatrix.size()));

}  // namespace
