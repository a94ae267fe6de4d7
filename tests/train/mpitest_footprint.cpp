// The footprint (train/footprint.h) against the live accounting: for every layout of the world size
// (np 1, 2, 4: dp and ZeRO 0-3, quantized weights and hpZ, Ulysses, ring, hybrid, TP, PP and its
// interleaved stages, GPT-2's tied head and Llama's GQA), each rank builds its part of the run
// (train/layout_builder.h) and compares what its ZeRO engines allocated, kind by kind, with the pure
// function at its place. Memory policies and the disk tier do not change the state; they are
// sized from the built stages still (train/memory_plan.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/train/footprint.h"
#include "odyssey/train/layout_builder.h"

using namespace odyssey;

namespace {

const char* kTiny = R"(
[model]
arch = "gpt2"
n_layer = 2
n_head = 4
d_model = 40
seq_len = 32
vocab_size = 256
[data]
train = "never-opened.bin"
[train]
global_batch = 8
micro_batch = 1
)";

struct Case {
  const char* name;
  int ranks;
  std::vector<std::string> sets;
};

const std::vector<Case> kCases = {
    {"single", 1, {"parallel.dp=1"}},
    {"single_zero3", 1, {"parallel.dp=1", "parallel.zero_stage=3"}},
    {"dp2_zero0", 2, {"parallel.dp=2"}},
    {"dp2_zero1_bucket", 2, {"parallel.dp=2", "parallel.zero_stage=1", "parallel.bucket_mb=0.01"}},
    {"dp2_zero2_qwd", 2, {"parallel.dp=2", "parallel.zero_stage=2", "comm.weights=qwd"}},
    {"dp2_zero3", 2, {"parallel.dp=2", "parallel.zero_stage=3"}},
    {"ulysses2_zero1", 2, {"parallel.dp=1", "parallel.sp_ulysses=2", "parallel.zero_stage=1"}},
    {"ring2_zero3", 2, {"parallel.dp=1", "parallel.sp_ring=2", "parallel.zero_stage=3"}},
    {"tp2_zero1", 2, {"parallel.dp=1", "parallel.tp=2", "parallel.zero_stage=1"}},
    {"pp2_tied_zero0", 2, {"parallel.dp=1", "parallel.pp=2"}},
    {"pp2_llama_zero1",
     2,
     {"parallel.dp=1", "parallel.pp=2", "parallel.zero_stage=1", "model.arch=llama", "model.n_kv_head=2",
      "model.d_ff=72"}},
    {"dp4_zero3_hpz",
     4,
     {"parallel.dp=4", "parallel.zero_stage=3", "comm.hpz=true", "parallel.ranks_per_node=2"}},
    {"dp2_ulysses2_zero2", 4, {"parallel.dp=2", "parallel.sp_ulysses=2", "parallel.zero_stage=2"}},
    {"hybrid_zero1",
     4,
     {"parallel.dp=1", "parallel.sp_ulysses=2", "parallel.sp_ring=2", "parallel.zero_stage=1"}},
    {"tp2_dp2_zero2", 4, {"parallel.dp=2", "parallel.tp=2", "parallel.zero_stage=2"}},
    {"tp4_llama_gqa_zero0",
     4,
     {"parallel.dp=1", "parallel.tp=4", "model.arch=llama", "model.n_kv_head=2", "model.d_ff=72"}},
    {"pp2_dp2_zero1", 4, {"parallel.dp=2", "parallel.pp=2", "parallel.zero_stage=1"}},
    {"pp2v2_tp2_interleaved",
     4,
     {"parallel.dp=1", "parallel.pp=2", "parallel.tp=2", "parallel.pp_virtual=2",
      "parallel.pp_schedule=interleaved", "model.n_layer=4"}},
};

}  // namespace

TEST(Footprint, StateEqualsTheEnginesAllocationOnEveryLayout) {
  Communicator& world = odyssey::world();
  int checked = 0;
  for (const Case& c : kCases) {
    if (c.ranks != world.size()) continue;
    SCOPED_TRACE(c.name);
    const RunConfig config = parse_run_config(kTiny, c.name, c.sets);
    config.validate(world.size());
    Layout layout(config, world);
    StateBytes live;
    for (const auto& engine : layout.engines) {
      const MemoryReport m = engine->memory();
      live.params += m.params, live.grads += m.grads, live.optimizer += m.optimizer;
    }
    // The place as the config gives it (parallel.dp set: no replicas count from the built grid).
    const RankPlace place{layout.grid.coords().pp, layout.grid.coords().tp, layout.replicas().rank()};
    const StateBytes pure = rank_state_bytes(config, place);
    EXPECT_EQ(pure.params, live.params);
    EXPECT_EQ(pure.grads, live.grads);
    EXPECT_EQ(pure.optimizer, live.optimizer);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}
