// Pipeline schedules as per-rank action tables (tensor-pipeline-parallelism.md §3): the model is cut
// into S = P v stages; stage s lives on pp rank s % P as its chunk s / P. Each rank runs its list of
// F(stage, micro-batch) and B(stage, micro-batch) in order; an F receives its input from the previous
// stage's rank and sends its output on, a B receives d(output) from the next stage's rank and sends
// d(input) back. Sends never block (they are asynchronous), receives do.
//
// Every table is validated before use (validate_schedule): each F and B exactly once per (stage,
// micro-batch) on the stage's rank, every rank's dependencies satisfiable, messages between two ranks
// received in the order they are sent (so one tag per direction suffices), and a unit-time simulation
// of all ranks that completes (no deadlock); the simulation also gives the bubble and the in-flight
// micro-batches per rank.
#pragma once

#include <string>
#include <vector>

#include "odyssey/core/enum_names.h"

namespace odyssey {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };
inline constexpr EnumNames<PipelineSchedule, 3> kPipelineScheduleNames = {
    {{"gpipe", PipelineSchedule::gpipe},
     {"1f1b", PipelineSchedule::one_f_one_b},
     {"interleaved", PipelineSchedule::interleaved}}};

struct PipelineShape {
  int P = 1;  // pipeline ranks
  int v = 1;  // stages (model chunks) per rank
  int m = 1;  // micro-batches per step
  int stages() const { return P * v; }
  int rank_of(int stage) const { return stage % P; }
  int chunk_of(int stage) const { return stage / P; }
};

struct PipeAction {
  enum Kind { forward, backward } kind;
  int stage;
  int mb;
  bool operator==(const PipeAction&) const = default;
};
std::string to_string(const PipeAction& a);  // "F(3,1)"

// The action table of every rank; fails naming the schedule's requirement a shape breaks (interleaved:
// v >= 2 and m % P == 0; the others v = 1).
std::vector<std::vector<PipeAction>> build_schedule(PipelineSchedule schedule, const PipelineShape& shape);

struct ScheduleSimulation {
  double step_time = 0;             // until the last rank finishes
  double bubble_fraction = 0;       // idle time / (P x step time)
  std::vector<int> peak_in_flight;  // per rank: micro-batch stages forwarded and not yet backwarded
};

// Validates the tables (see above) and simulates them with forward time t_f and backward time t_b per
// stage and free communication; fails naming the first problem (and, on a deadlock, every rank's
// blocked action).
ScheduleSimulation validate_schedule(const std::vector<std::vector<PipeAction>>& tables,
                                     const PipelineShape& shape, double t_f = 1, double t_b = 2);

// Layers [begin, end) of each of S stages: n_layer layers plus one layer's worth for the embeddings
// (stage 0) and one for the head (stage S-1), divided as evenly as possible, every stage at least one
// layer. Fails naming model.n_layer when there are fewer layers than stages.
std::vector<std::pair<int, int>> split_layers(int n_layer, int stages);
// The stages' layer ranges: split_layers, or the explicit layer counts (parallel.pp_layers, one per
// stage, each >= 1, summing to n_layer; fails naming the key otherwise).
std::vector<std::pair<int, int>> stage_layers(int n_layer, int stages, const std::vector<int>& layers);
// "[0, 3) [3, 5)": the split as printed at start.
std::string describe_stage_layers(const std::vector<std::pair<int, int>>& ranges);

}  // namespace odyssey
