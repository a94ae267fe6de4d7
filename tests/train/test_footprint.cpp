// The footprint of a layout no machine here can build: a 70B Llama (Llama-3-70B's shape, fp32) on
// 1,024 ranks (dp 8 x tp 8 x pp 4 x Ulysses 4), every rank's state, activations, communication buffers
// and offload in one process. Prints the time (not asserted) and checks the state against the closed
// forms of ZeRO-1 sharding and the activations' order of the memory policies.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "odyssey/train/footprint.h"

using namespace odyssey;

namespace {

RunConfig llama_70b_on_1024_ranks() {
  return parse_run_config(R"(
[model]
arch = "llama"
n_layer = 80
n_head = 64
n_kv_head = 8
d_model = 8192
d_ff = 28672
seq_len = 8192
vocab_size = 128256
tie_embeddings = false
[data]
train = "never-opened.bin"
[train]
global_batch = 64
micro_batch = 1
[parallel]
dp = 8
tp = 8
pp = 4
sp_ulysses = 4
zero_stage = 1
)",
                          "llama-70b", {});
}

}  // namespace

TEST(Footprint, Llama70bOn1024RanksInOneProcess) {
  const RunConfig config = llama_70b_on_1024_ranks();
  config.validate(1024);
  // Every rank's state: its pp x tp place decides its tables; its replica rank only which shard it
  // holds, the same size on every replica (segments are padded to a multiple of the 32 replicas).
  const auto start = std::chrono::steady_clock::now();
  std::vector<StateBytes> per_place;
  for (int pp = 0; pp < 4; ++pp)
    for (int tp = 0; tp < 8; ++tp) per_place.push_back(rank_state_bytes(config, RankPlace{pp, tp, 0}));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StateBytes most;
  for (const StateBytes& s : per_place)
    if (s.total() > most.total()) most = s;
  std::printf(
      "70B Llama, dp 8 x tp 8 x pp 4 x Ulysses 4 (1,024 ranks, 32 places): state in %.3f s; the largest "
      "rank %.2f GiB (params %.2f, grads %.2f, optimizer %.2f)\n",
      seconds, most.total() / 1073741824.0, most.params / 1073741824.0, most.grads / 1073741824.0,
      most.optimizer / 1073741824.0);
  // The replicas of a place hold the same bytes (the last replica of the last place, and one between).
  EXPECT_EQ(rank_state_bytes(config, RankPlace{3, 7, 31}).total(), per_place.back().total());
  EXPECT_EQ(rank_state_bytes(config, RankPlace{1, 2, 17}).total(), per_place[size_t(1 * 8 + 2)].total());
  // ZeRO-1: full fp32 weights and gradients of the rank's piece plus the gradient shard, moments over
  // its 1/32 share; a pp x tp piece of ~70.6e9 parameters is about 2.2e9: weights ~8.8 GB.
  EXPECT_EQ(most.grads, most.params + most.optimizer / 2);
  EXPECT_GT(most.params, uint64_t(7e9));
  EXPECT_LT(most.params, uint64_t(11e9));
  EXPECT_EQ(max_rank_footprint(config, 1024, CheckpointPolicy::none).state.total(), most.total());
}

TEST(Footprint, Llama70bWholeFootprintOn1024RanksInOneProcess) {
  const RunConfig config = llama_70b_on_1024_ranks();
  config.validate(1024);
  uint64_t previous = UINT64_MAX;
  for (CheckpointPolicy policy : {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                  CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
    const auto start = std::chrono::steady_clock::now();
    const RankFootprint f = max_rank_footprint(config, 1024, policy);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "70B Llama on 1,024 ranks, memory.checkpoint = %s: every place's footprint in %.3f s; the largest "
        "rank "
        "%.2f GiB (state %.2f, activations %.2f, comm buffers %.3f)\n",
        enum_name(kCheckpointPolicyNames, policy), seconds, f.ram() / 1073741824.0,
        f.state.total() / 1073741824.0, f.activations / 1073741824.0, f.comm_buffers / 1073741824.0);
    // Each policy keeps less than the one before it (8,192 tokens over 4 Ulysses ranks, 20 layers a stage).
    EXPECT_LT(f.activations, previous) << enum_name(kCheckpointPolicyNames, policy);
    previous = f.activations;
    EXPECT_GT(f.comm_buffers, 0u);  // MPI's reduction transient at least
    EXPECT_EQ(f.offload, 0u);       // the RAM tier
  }
}
