// Per-rank memory of the ZeRO stages (run at np 1, 2 and 4): optimizer state falls as 1/dp from
// ZeRO-1 on, persistent gradients from ZeRO-2 on, parameters too with ZeRO-3 — exactly, up to the
// padding of each segment to a multiple of dp.
#include <gtest/gtest.h>

#include <cstdio>

#include "odyssey/comm/runtime.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/parallel/zero.h"

using namespace odyssey;

namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 4;
  c.n_head = 5;
  c.d_model = 255;
  c.seq_len = 129;
  c.vocab_size = 1001;
  return c;
}

MemoryReport report(Communicator& dp, int stage) {
  GPT2 model(small_config(), false);
  ZeroOptions o;
  o.stage = stage;
  o.bucket_mb = 1;
  const AdamW adamw(AdamWConfig{});
  ZeroEngine engine(model, dp, o, adamw);
  return engine.memory();
}

class ZeroMemory : public ::testing::TestWithParam<int> {};

TEST_P(ZeroMemory, ShardedStateFallsAsOneOverDp) {
  const int stage = GetParam();
  Communicator& dp = world();
  const int P = dp.size();
  SingleCommunicator one;
  const MemoryReport full = report(one, stage), mine = report(dp, stage);
  GPT2 probe(small_config(), false);
  const int64_t psi = probe.num_params();
  const uint64_t segments = uint64_t(probe.table().num_units());  // at most one per unit
  // Sharded: P x mine covers full, with at most P-1 padding elements per segment (4 bytes each).
  auto expect_sharded = [&](uint64_t per_rank, uint64_t whole, uint64_t arrays, const char* what) {
    EXPECT_GE(per_rank * uint64_t(P), whole) << what;
    EXPECT_LE(per_rank * uint64_t(P) - whole, arrays * 4 * segments * uint64_t(P - 1)) << what;
  };
  EXPECT_EQ(full.optimizer, uint64_t(psi) * 8);
  if (stage >= 1)
    expect_sharded(mine.optimizer, full.optimizer, 2, "optimizer");
  else
    EXPECT_EQ(mine.optimizer, full.optimizer);
  if (stage >= 2)
    expect_sharded(mine.grads, uint64_t(psi) * 4, 1, "gradients");
  else
    EXPECT_GE(mine.grads, uint64_t(psi) * 4);
  if (stage == 3)
    expect_sharded(mine.params, uint64_t(psi) * 4, 1, "parameters");
  else
    EXPECT_GE(mine.params, uint64_t(psi) * 4);
  if (dp.rank() == 0)
    std::printf(
        "  ZeRO-%d, dp %d, %.2fM parameters: per rank params %.2f MB, grads %.2f MB, optimizer %.2f MB\n",
        stage, P, psi / 1e6, mine.params / 1e6, mine.grads / 1e6, mine.optimizer / 1e6);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroMemory, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

}  // namespace
