// Pipeline schedules as per-rank action tables (tensor-pipeline-parallelism.md §3): the model is cut
// into S = P v stages; stage s lives on pp rank s % P as its chunk s / P. Each rank runs its list of
// F(stage, micro-batch) and B(stage, micro-batch) in order; an F receives its input from the previous
// stage's rank and sends its output on, a B receives d(output) from the next stage's rank and sends
// d(input) back. Sends never block (they are asynchronous), receives do. Zero-bubble schedules (zb1)
// split each B in two: I (input gradients; communicates as B does) and W (the weight-gradient GEMMs,
// local, after the I of the same stage and micro-batch), deferred to fill the bubbles.
//
// Every table is validated before use (validate_schedule): each F and B exactly once per (stage,
// micro-batch) on the stage's rank, every rank's dependencies satisfiable, messages between two ranks
// received in the order they are sent (so one tag per direction suffices), and a unit-time simulation
// of all ranks that completes (no deadlock); the simulation also gives the bubble and the in-flight
// micro-batches per rank. Per stage, the backward actions (B, or I and W) run in increasing
// micro-batch order, so every parameter accumulates its gradient in the single process's order.
#pragma once

#include <string>
#include <vector>

#include "odyssey/core/enum_names.h"

namespace odyssey {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved, zb1 };
inline constexpr EnumNames<PipelineSchedule, 4> kPipelineScheduleNames = {
    {{"gpipe", PipelineSchedule::gpipe},
     {"1f1b", PipelineSchedule::one_f_one_b},
     {"interleaved", PipelineSchedule::interleaved},
     {"zb1", PipelineSchedule::zb1}}};

struct PipelineShape {
  int P = 1;  // pipeline ranks
  int v = 1;  // stages (model chunks) per rank
  int m = 1;  // micro-batches per step
  int stages() const { return P * v; }
  int rank_of(int stage) const { return stage % P; }
  int chunk_of(int stage) const { return stage / P; }
};

struct PipeAction {
  // backward = input + weight; a table has either B or both I and W for every (stage, micro-batch).
  enum Kind { forward, backward, input, weight } kind;
  int stage;
  int mb;
  bool operator==(const PipeAction&) const = default;
};
std::string to_string(const PipeAction& a);  // "F(3,1)", "I(3,1)", "W(3,1)"

// The action table of every rank; fails naming the schedule's requirement a shape breaks (interleaved:
// v >= 2 and m % P == 0; the others v = 1).
// zb1 (ZB-H1, spec §3.4): 1F1B with every B an I; rank r numbers its I's 0, 1, ... and after the k-th,
// for k >= r, runs the W of its oldest micro-batch still pending; the rest run after the last I,
// oldest first. Rank 0 never defers, rank P-1 defers up to P-1.
std::vector<std::vector<PipeAction>> build_schedule(PipelineSchedule schedule, const PipelineShape& shape);

// zb1 runs the weight gradients after the backward that ZeRO 2-3 end each micro-batch's gradients
// with (their reduce-scatter), GPipe every loss before the first backward: only ZeRO 0-1 compose with
// them; refused naming both keys otherwise.
void check_schedule_zero_stage(PipelineSchedule schedule, int zero_stage);

struct ScheduleSimulation {
  double step_time = 0;        // until the last rank finishes
  double bubble_fraction = 0;  // idle time / (P x step time)
  // Per rank: micro-batch stages forwarded whose B (or W: its GEMM operands are kept until then) has
  // not run yet.
  std::vector<int> peak_in_flight;
};

// Validates the tables (see above) and simulates them with forward time t_f and backward time t_b per
// stage, of which a W takes t_w and an I the rest (t_b - t_w), and free communication; fails naming the
// first problem (and, on a deadlock, every rank's blocked action).
ScheduleSimulation validate_schedule(const std::vector<std::vector<PipeAction>>& tables,
                                     const PipelineShape& shape, double t_f = 1, double t_b = 2,
                                     double t_w = 1);

// ZB-H1's idle fraction with unit-free costs (spec §3.8): (P-1)(t_f + t_i - t_w) idle per rank out of a
// step of m (t_f + t_i + t_w) + (P-1)(t_f + t_i - t_w); the regime m >= P.
double zb1_bubble_fraction(int P, int m, double t_f, double t_i, double t_w);

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
