// Pipeline schedules: for every small (P, v, m) each schedule's tables validate (every action once,
// messages in order, no deadlock in the unit-time simulation), GPipe and 1F1B idle (P-1)/(m+P-1) of
// the step and interleaved (P-1)/(vm+P-1) (t_B = 2 t_F, spec §3.8), ZB-H1 its formula (t_F = t_I = t_W),
// and the peak in-flight micro-batches are the spec's. Broken tables are refused with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "odyssey/core/error.h"
#include "odyssey/parallel/pipeline_schedule.h"

namespace odyssey {
namespace {

TEST(PipelineSchedule, EverySmallCaseValidatesWithTheFormulaBubble) {
  int cases = 0;
  for (int P = 1; P <= 8; ++P)  // spec §6.6: P in 1..8, m in 1..3P, v in 1..3
    for (int m = 1; m <= 3 * P; ++m) {
      for (PipelineSchedule kind : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
        const PipelineShape s{P, 1, m};
        const ScheduleSimulation sim = validate_schedule(build_schedule(kind, s), s);
        EXPECT_NEAR(sim.bubble_fraction, double(P - 1) / (m + P - 1), 1e-12) << P << " " << m;
        for (int r = 0; r < P; ++r)
          EXPECT_EQ(sim.peak_in_flight[size_t(r)], kind == PipelineSchedule::gpipe ? m : std::min(P - r, m))
              << "P " << P << " m " << m << " rank " << r;
        ++cases;
      }
      {
        // ZB-H1 with t_F = t_I = t_W = 1: (P-1) idle units per rank; every rank holds min(P, m)
        // micro-batches from F to W (rank 0 never defers; rank r defers r, on 1F1B's P - r).
        const PipelineShape s{P, 1, m};
        const auto tables = build_schedule(PipelineSchedule::zb1, s);
        const ScheduleSimulation sim = validate_schedule(tables, s, 1, 2, 1);
        if (m >= P) {
          EXPECT_NEAR(sim.bubble_fraction, zb1_bubble_fraction(P, m, 1, 1, 1), 1e-12) << P << " " << m;
        }
        for (int r = 0; r < P; ++r) {
          EXPECT_EQ(sim.peak_in_flight[size_t(r)], std::min(P, m))
              << "P " << P << " m " << m << " rank " << r;
          // Rank 0 runs each W right after its I.
          if (r > 0) continue;
          for (size_t i = 0; i < tables[0].size(); ++i)
            if (tables[0][i].kind == PipeAction::input) {
              EXPECT_EQ(tables[0][i + 1].kind, PipeAction::weight);
            }
        }
        ++cases;
      }
      for (int v = 2; v <= 3; ++v) {
        if (m % P) continue;
        const PipelineShape s{P, v, m};
        const ScheduleSimulation sim = validate_schedule(build_schedule(PipelineSchedule::interleaved, s), s);
        if (P > 1 && m >= P) {  // the formula's regime
          EXPECT_NEAR(sim.bubble_fraction, double(P - 1) / (v * m + P - 1), 1e-12)
              << P << " " << v << " " << m;
        }
        // Its warm-up forwards and one more (first rank: P + (P - 1) / v whole stages).
        for (int r = 0; r < P; ++r)
          EXPECT_EQ(sim.peak_in_flight[size_t(r)], std::min((P - r - 1) * 2 + (v - 1) * P + 1, m * v))
              << "P " << P << " v " << v << " m " << m << " rank " << r;
        ++cases;
      }
    }
  EXPECT_GT(cases, 350);
}

TEST(PipelineSchedule, SpecFigures) {
  // Spec §3.8: P=4, m=8, t_F=1, t_B=2: 1F1B idle 27.3%, interleaved v=2 15.8%.
  const PipelineShape a{4, 1, 8}, b{4, 2, 8};
  EXPECT_NEAR(validate_schedule(build_schedule(PipelineSchedule::one_f_one_b, a), a).bubble_fraction, 0.2727,
              1e-4);
  EXPECT_NEAR(validate_schedule(build_schedule(PipelineSchedule::interleaved, b), b).bubble_fraction, 0.1579,
              1e-4);
  // t_F = t_I = t_W = 1: 1F1B 27.3% vs ZB-H1 11.1%.
  EXPECT_NEAR(validate_schedule(build_schedule(PipelineSchedule::zb1, a), a, 1, 2, 1).bubble_fraction, 0.1111,
              1e-4);
  // The last rank defers P - 1 = 3 W's: its 4th I is followed by the first W.
  const auto zb = build_schedule(PipelineSchedule::zb1, a);
  std::string last;
  for (const PipeAction& x : zb[3]) last += to_string(x);
  EXPECT_EQ(last.substr(0, 6 * 12),
            "F(3,0)I(3,0)F(3,1)I(3,1)F(3,2)I(3,2)F(3,3)I(3,3)W(3,0)F(3,4)I(3,4)W(3,1)");
}

TEST(PipelineSchedule, BrokenTablesAreRefused) {
  const PipelineShape s{2, 1, 2};
  auto message = [&](std::vector<std::vector<PipeAction>> t) {
    try {
      validate_schedule(t, s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  using A = PipeAction;
  // Rank 1 runs its backwards before the forwards they need: every rank waits.
  EXPECT_NE(message({{{A::forward, 0, 0}, {A::forward, 0, 1}, {A::backward, 0, 0}, {A::backward, 0, 1}},
                     {{A::backward, 1, 0}, {A::forward, 1, 0}, {A::forward, 1, 1}, {A::backward, 1, 1}}})
                .find("deadlocks"),
            std::string::npos);
  // Micro-batches received in another order than sent.
  EXPECT_NE(message({{{A::forward, 0, 0}, {A::forward, 0, 1}, {A::backward, 0, 0}, {A::backward, 0, 1}},
                     {{A::forward, 1, 1}, {A::forward, 1, 0}, {A::backward, 1, 0}, {A::backward, 1, 1}}})
                .find("order"),
            std::string::npos);
  // An action missing, one twice.
  EXPECT_NE(message({{{A::forward, 0, 0}, {A::forward, 0, 0}, {A::backward, 0, 0}, {A::backward, 0, 1}},
                     {{A::forward, 1, 0}, {A::forward, 1, 1}, {A::backward, 1, 0}, {A::backward, 1, 1}}})
                .find("twice"),
            std::string::npos);
  // Split backward: a W before its I, W's out of micro-batch order, B mixed with I/W.
  EXPECT_NE(message({{{A::forward, 0, 0},
                      {A::forward, 0, 1},
                      {A::input, 0, 0},
                      {A::weight, 0, 0},
                      {A::input, 0, 1},
                      {A::weight, 0, 1}},
                     {{A::forward, 1, 0},
                      {A::weight, 1, 0},
                      {A::input, 1, 0},
                      {A::forward, 1, 1},
                      {A::input, 1, 1},
                      {A::weight, 1, 1}}})
                .find("deadlocks"),
            std::string::npos);
  EXPECT_NE(message({{{A::forward, 0, 0},
                      {A::forward, 0, 1},
                      {A::input, 0, 0},
                      {A::input, 0, 1},
                      {A::weight, 0, 1},
                      {A::weight, 0, 0}},
                     {{A::forward, 1, 0},
                      {A::input, 1, 0},
                      {A::weight, 1, 0},
                      {A::forward, 1, 1},
                      {A::input, 1, 1},
                      {A::weight, 1, 1}}})
                .find("micro-batch order"),
            std::string::npos);
  EXPECT_NE(message({{{A::forward, 0, 0},
                      {A::forward, 0, 1},
                      {A::input, 0, 0},
                      {A::weight, 0, 0},
                      {A::input, 0, 1},
                      {A::weight, 0, 1}},
                     {{A::forward, 1, 0}, {A::backward, 1, 0}, {A::forward, 1, 1}, {A::backward, 1, 1}}})
                .find("actions, expected"),
            std::string::npos);
  EXPECT_THROW(build_schedule(PipelineSchedule::zb1, {2, 2, 4}), Error);          // v = 2
  EXPECT_THROW(build_schedule(PipelineSchedule::interleaved, {2, 2, 3}), Error);  // m % P
  EXPECT_THROW(build_schedule(PipelineSchedule::interleaved, {2, 1, 4}), Error);  // v = 1
  EXPECT_THROW(build_schedule(PipelineSchedule::one_f_one_b, {2, 2, 4}), Error);  // v = 2
}

TEST(PipelineSchedule, LayerSplit) {
  using R = std::vector<std::pair<int, int>>;
  EXPECT_EQ(split_layers(5, 2), (R{{0, 3}, {3, 5}}));  // 1 + 3 | 2 + 1
  EXPECT_EQ(split_layers(4, 4), (R{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(split_layers(12, 4), (R{{0, 3}, {3, 6}, {6, 10}, {10, 12}}));  // 1 + 3 | 3 | 4 | 2 + 1
  for (int L = 1; L <= 20; ++L)
    for (int S = 1; S <= L; ++S) {
      const auto r = split_layers(L, S);
      ASSERT_EQ(int(r.size()), S);
      int next = 0;
      for (auto [b, e] : r) {
        EXPECT_EQ(b, next);
        EXPECT_LT(b, e);
        next = e;
      }
      EXPECT_EQ(next, L);
    }
  EXPECT_THROW(split_layers(3, 4), Error);
  // An explicit split (parallel.pp_layers) places every layer once, each stage at least one.
  EXPECT_EQ(stage_layers(9, 2, {}), split_layers(9, 2));
  EXPECT_EQ(stage_layers(9, 3, {1, 5, 3}), (R{{0, 1}, {1, 6}, {6, 9}}));
  EXPECT_EQ(describe_stage_layers({{0, 1}, {1, 6}}), "[0, 1) [1, 6)");
  EXPECT_THROW(stage_layers(9, 2, {4, 4}), Error);     // a layer missing
  EXPECT_THROW(stage_layers(9, 2, {1, 4, 4}), Error);  // one entry per stage
  EXPECT_THROW(stage_layers(9, 2, {0, 9}), Error);     // an empty stage
}

}  // namespace
}  // namespace odyssey
