// ZeRO 0-3 over every rank of the job (run at np 1, 2 and 4) reproduce the single-process run: 10
// steps of a tiny odd-sized model with gradient accumulation and several buckets give the same losses
// (relative 1e-5) and the same final parameters (1e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "odyssey/comm/runtime.h"
#include "zero_test_util.h"

using namespace odyssey;
using namespace odyssey::testing_zero;

namespace {

constexpr int kSteps = 10;

const RunResult& reference() {
  static const RunResult r = train_reference(kSteps, 2);
  return r;
}

void expect_parity(const RunResult& got, int rank) {
  const RunResult& want = reference();
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << "step " << s + 1;
    EXPECT_NEAR(got.norms[s], want.norms[s], 1e-4 * std::abs(want.norms[s])) << "step " << s + 1;
  }
  if (rank != 0) return;
  ASSERT_EQ(got.params.size(), want.params.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < want.params.size(); ++i) {
    double d = std::abs(double(got.params[i]) - double(want.params[i]));
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, 1e-5) << "largest parameter difference at element " << at;
  double worst_loss = 0;
  for (size_t s = 0; s < want.losses.size(); ++s)
    worst_loss = std::max(worst_loss, std::abs(got.losses[s] / want.losses[s] - 1));
  std::printf("  losses within %.1e (relative), parameters within %.1e; grad norm step 1 %.3f (clip %.1f)\n",
              worst_loss, worst, want.norms[0], double(kClip));
}

class ZeroParity : public ::testing::TestWithParam<int> {};

TEST_P(ZeroParity, MatchesSingleProcessWithAccumulationAndBuckets) {
  Communicator& dp = world();
  ZeroOptions o;
  o.stage = GetParam();
  o.bucket_mb = 0.03;  // ~7.5k floats: buckets [ln_f + layer 1], [layer 0], [embeddings]
  const int micro_batch = kGlobalBatch / (2 * dp.size());  // two micro-steps per rank
  expect_parity(train_zero(dp, o, kSteps, micro_batch), dp.rank());
}

TEST_P(ZeroParity, MatchesWithOneBucketPerUnitAndNoAccumulation) {
  Communicator& dp = world();
  ZeroOptions o;
  o.stage = GetParam();
  o.bucket_mb = 0;
  o.max_in_flight = 1;
  expect_parity(train_zero(dp, o, kSteps, kGlobalBatch / dp.size()), dp.rank());
}

TEST_P(ZeroParity, MatchesWithoutOverlap) {
  Communicator& dp = world();
  ZeroOptions o;
  o.stage = GetParam();
  o.overlap = false;
  expect_parity(train_zero(dp, o, kSteps, 1), dp.rank());
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroParity, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

}  // namespace
