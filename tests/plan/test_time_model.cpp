// The time model's pipeline bubble against the engine's own schedule simulation, and the CPU share of
// a host's cores.
#include <gtest/gtest.h>

#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/cluster.h"
#include "odyssey/plan/layout.h"
#include "odyssey/plan/time_model.h"

namespace odyssey {
namespace {

// The idle time of a schedule's slowest rank as the engine's simulation of its action table gives it
// (per stage chunk: forward f, backward b of which w are weight gradients), against the planner's
// closed form over a rank's whole micro-batch (v chunks).
void expect_bubble_as_simulated(PipelineSchedule schedule, int P, int v, int m, double f, double b,
                                double w) {
  const PipelineShape shape{P, v, m};
  const ScheduleSimulation sim = validate_schedule(build_schedule(schedule, shape), shape, f, b, w);
  const double busy = m * v * (f + b);  // every rank's compute in the step
  const double planned = pipeline_bubble_seconds(schedule, P, v, v * f, v * b, v * w);
  EXPECT_NEAR(planned, sim.step_time - busy, 1e-9 * sim.step_time)
      << enum_name(kPipelineScheduleNames, schedule) << " P " << P << " v " << v << " m " << m;
}

TEST(TimeModel, PipelineBubbleEqualsTheScheduleSimulation) {
  for (int m : {4, 8, 16}) {
    expect_bubble_as_simulated(PipelineSchedule::gpipe, 4, 1, m, 1, 2, 1);
    expect_bubble_as_simulated(PipelineSchedule::one_f_one_b, 4, 1, m, 1, 2, 1);
    expect_bubble_as_simulated(PipelineSchedule::interleaved, 4, 2, m, 1, 2, 1);
    expect_bubble_as_simulated(PipelineSchedule::zb1, 4, 1, m, 1, 2, 1);
    // Weight gradients longer than the gaps they fill (t_w > t_f, t_w > t_i): the bubble stops shrinking.
    expect_bubble_as_simulated(PipelineSchedule::zb1, 4, 1, m, 1, 3, 1.5);
    expect_bubble_as_simulated(PipelineSchedule::zb1, 4, 1, m, 2, 4, 3);
    expect_bubble_as_simulated(PipelineSchedule::zb1, 4, 1, m, 1, 2.5, 0.5);
  }
  expect_bubble_as_simulated(PipelineSchedule::one_f_one_b, 8, 1, 32, 1, 2, 1);
  expect_bubble_as_simulated(PipelineSchedule::interleaved, 8, 4, 32, 1, 2, 1);
  expect_bubble_as_simulated(PipelineSchedule::zb1, 2, 1, 6, 1.5, 2.5, 1);
}

TEST(TimeModel, PipelineBubbleFractionsOfTheSpec) {
  // tensor-pipeline-parallelism.md §3.8, P = 4, m = 8, t_F = 1, t_B = 2: 1F1B idles 27.3% of the step,
  // interleaved v = 2 15.8%; with t_F = t_I = t_W = 1 ZB-H1 11.1%.
  auto fraction = [](double bubble, double busy) { return bubble / (busy + bubble); };
  EXPECT_NEAR(fraction(pipeline_bubble_seconds(PipelineSchedule::one_f_one_b, 4, 1, 1, 2, 1), 8 * 3), 0.273,
              5e-4);
  EXPECT_NEAR(fraction(pipeline_bubble_seconds(PipelineSchedule::interleaved, 4, 2, 2, 4, 2), 8 * 6), 0.158,
              5e-4);
  EXPECT_NEAR(fraction(pipeline_bubble_seconds(PipelineSchedule::zb1, 4, 1, 1, 2, 1), 8 * 3), 0.111, 5e-4);
}

TEST(TimeModel, EmulatedNodesShareOneHostsCores) {
  // A CPU host of 2 cores running 2 ranks: emulating 2 nodes of 1 rank (parallel.ranks_per_node = 1)
  // splits the groups, not the cores; each rank still computes on one core.
  const Cluster cluster = parse_cluster(
      "name = \"host\"\nnodes = 1\ndevices_per_node = 2\n[device]\nkind = \"cpu\"\nmemory_gib = 8\n"
      "memory_bandwidth_gbs = 10\ncores_per_node = 2\n[[device.gemm]]\nm = 1024\nn = 1024\nk = 1024\n"
      "dtype = \"fp32\"\nflops = 5e10\n[[level]]\nname = \"intra\"\nspan = \"node\"\nlink_bandwidth_gbs = 5\n"
      "latency_us = 5\n",
      "test");
  RunConfig c = parse_run_config(
      "[model]\nn_layer = 2\nn_head = 4\nd_model = 128\nseq_len = 256\nvocab_size = 256\n"
      "[train]\nglobal_batch = 8\nmicro_batch = 4\n[parallel]\nzero_stage = 1\n",
      "test", {});
  auto compute = [&](int ranks_per_node, int world) {
    RunConfig x = c;
    x.parallel.ranks_per_node = ranks_per_node;
    x.train.micro_batch = 8 / world;
    const PlanLayout layout(x, world, cluster.devices_per_node);
    const StepTime t = step_time(layout, comm_schedule(layout, 0, false), cluster, 0);
    return t.compute_fwd_s + t.compute_bwd_s;
  };
  EXPECT_DOUBLE_EQ(compute(1, 2), compute(0, 2));
  // 4 ranks on the 2 cores: half a core each for half the tokens, as long as one rank on one core.
  EXPECT_NEAR(compute(0, 4), compute(0, 2), 0.35 * compute(0, 2));
  EXPECT_GT(compute(0, 4), 0.9 * compute(0, 2));
}

}  // namespace
}  // namespace odyssey
