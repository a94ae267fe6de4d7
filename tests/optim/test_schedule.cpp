// LrSchedule: linear warmup, then cosine decay (or constant). Shared by the reference and every
// parallel run, so parity tests cannot catch a bug here: these pin its values directly.
//
// Convention (llm.c's get_learning_rate_cosine): steps are 0-based, warmup step i gives
// lr * (i+1) / warmup, and the cosine runs over [warmup, total_steps], reaching min_lr at step
// total_steps, one past the last step a run takes (which therefore still has a little more than
// min_lr).
#include "odyssey/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace odyssey {
namespace {

LrSchedule make(const char* kind, int64_t warmup, int64_t total, float lr = 1e-3f, float min_lr = 1e-4f) {
  LrSchedule s;
  s.kind = parse_enum(kScheduleNames, kind, "train.schedule");
  s.lr = lr;
  s.min_lr = min_lr;
  s.warmup_steps = warmup;
  s.total_steps = total;
  return s;
}

// The cosine written out from its definition, in double.
double cosine_reference(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) return double(s.lr) * double(step + 1) / double(s.warmup_steps);
  const double span = double(std::max<int64_t>(1, s.total_steps - s.warmup_steps));
  const double progress = std::min(1.0, double(step - s.warmup_steps) / span);
  return s.min_lr + (s.lr - double(s.min_lr)) * (1.0 + std::cos(M_PI * progress)) / 2.0;
}

TEST(LrSchedule, NoWarmupStartsAtLr) {
  const LrSchedule s = make("cosine", 0, 10);
  EXPECT_EQ(s.at(0), s.lr);  // exact: cos(0) = 1
  EXPECT_LT(s.at(1), s.lr);
  EXPECT_EQ(make("constant", 0, 10).at(0), 1e-3f);
}

TEST(LrSchedule, OneWarmupStep) {
  // Step 0 is the whole warmup (lr * 1/1), step 1 is the start of the cosine: lr again.
  const LrSchedule s = make("cosine", 1, 10);
  EXPECT_EQ(s.at(0), s.lr);
  EXPECT_EQ(s.at(1), s.lr);
  EXPECT_LT(s.at(2), s.lr);
}

TEST(LrSchedule, LinearWarmup) {
  const LrSchedule s = make("cosine", 4, 20);
  EXPECT_FLOAT_EQ(s.at(0), 0.25e-3f);
  EXPECT_FLOAT_EQ(s.at(1), 0.50e-3f);
  EXPECT_FLOAT_EQ(s.at(2), 0.75e-3f);
  EXPECT_EQ(s.at(3), s.lr);  // the end of warmup reaches lr exactly
  EXPECT_EQ(s.at(4), s.lr);  // and the cosine starts there
  // Warmup ignores min_lr: it starts from lr / warmup even when that is below min_lr.
  EXPECT_FLOAT_EQ(make("cosine", 100, 200).at(0), 1e-5f);
}

TEST(LrSchedule, CosineEndpointsAndMidpoint) {
  const LrSchedule s = make("cosine", 5, 25);  // cosine over steps 5..25
  EXPECT_EQ(s.at(5), s.lr);
  EXPECT_FLOAT_EQ(s.at(15), (s.lr + s.min_lr) / 2);  // halfway: cos(pi/2) = 0
  EXPECT_EQ(s.at(25), s.min_lr);                     // exact: cos(pi) = -1
  // The last step a 25-step run takes (24) is one decay step short of min_lr.
  EXPECT_GT(s.at(24), s.min_lr);
  EXPECT_NEAR(s.at(24), cosine_reference(s, 24), 1e-9);
  EXPECT_NEAR(s.at(24) - s.min_lr, (s.lr - s.min_lr) * (1 + std::cos(M_PI * 19 / 20)) / 2, 1e-9);
  // Past the end it stays at min_lr (a resumed run with more steps than planned does not rise again).
  EXPECT_EQ(s.at(26), s.min_lr);
  EXPECT_EQ(s.at(1000), s.min_lr);
  // min_lr 0 decays to exactly 0.
  EXPECT_EQ(make("cosine", 0, 8, 1e-3f, 0.0f).at(8), 0.0f);
}

TEST(LrSchedule, MatchesTheDefinition) {
  for (int64_t warmup : {0, 1, 3, 10}) {
    for (int64_t total : {1, 2, 7, 10, 64}) {
      const LrSchedule s = make("cosine", warmup, total, 6e-4f, 6e-5f);
      for (int64_t step = 0; step < total + 3; ++step) {
        EXPECT_NEAR(s.at(step), cosine_reference(s, step), 1e-6 * s.lr)
            << "warmup " << warmup << " total " << total << " step " << step;
      }
    }
  }
}

TEST(LrSchedule, ConstantAfterWarmup) {
  const LrSchedule s = make("constant", 3, 10);
  EXPECT_FLOAT_EQ(s.at(0), s.lr / 3);
  EXPECT_FLOAT_EQ(s.at(1), 2 * s.lr / 3);
  for (int64_t step = 2; step < 20; ++step) EXPECT_EQ(s.at(step), s.lr) << step;  // min_lr plays no part
}

TEST(LrSchedule, WarmupLongerThanTheRun) {
  // Every step of the run is in warmup: lr is never reached, and nothing divides by zero.
  const LrSchedule s = make("cosine", 10, 4);
  for (int64_t step = 0; step < 4; ++step) EXPECT_FLOAT_EQ(s.at(step), s.lr * float(step + 1) / 10);
  EXPECT_EQ(s.at(10), s.lr);
  EXPECT_EQ(s.at(11), s.min_lr);  // decay span clamped to one step
  // Warmup equal to the run: the same, and total_steps 1 with no warmup is a single step at lr.
  EXPECT_EQ(make("cosine", 4, 4).at(3), 1e-3f);
  EXPECT_EQ(make("cosine", 0, 1).at(0), 1e-3f);
  EXPECT_EQ(make("cosine", 0, 1).at(1), 1e-4f);
}

TEST(LrSchedule, Monotone) {
  for (const char* kind : {"cosine", "constant"}) {
    for (int64_t warmup : {0, 1, 2, 5, 50}) {
      for (int64_t total : {1, 2, 3, 10, 100, 1000}) {
        const LrSchedule s = make(kind, warmup, total, 3e-4f, 3e-5f);
        float prev = 0.0f;
        for (int64_t step = 0; step < total + 5; ++step) {
          const float lr = s.at(step);
          const auto where = ::testing::Message()
                             << kind << " warmup " << warmup << " total " << total << " step " << step;
          if (step < warmup) {
            EXPECT_GT(lr, prev) << where;  // strictly rising
            EXPECT_LE(lr, s.lr) << where;
          } else {
            if (step > 0) {
              EXPECT_LE(lr, prev) << where;  // never rising after warmup
            }
            EXPECT_GE(lr, s.min_lr) << where;
            EXPECT_LE(lr, s.lr) << where;
          }
          prev = lr;
        }
      }
    }
  }
}

}  // namespace
}  // namespace odyssey
