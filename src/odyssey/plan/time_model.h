// The time model (planner.md §6): a step's time from the layout's compute (GEMM FLOPs at measured or
// declared rates, attention, memory-bound kernels, the optimizer), its communication (α-β per network
// level over the byte model's records), overlap, and the pipeline bubble. Every term is reported.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/cluster.h"
#include "odyssey/plan/layout.h"

namespace odyssey {

// One GEMM of a micro-batch: C[m, n] = A[m, k] B[k, n], `count` times (forward only; the backward runs
// two of the same FLOPs: dX and dW).
struct GemmShape {
  std::string name;
  int64_t m = 0, n = 0, k = 0;
  int count = 1;
  double flops() const { return 2.0 * double(m) * double(n) * double(k) * count; }
};

// The GEMMs of one micro-batch of `layers` layers (and the LM head when `head`) on a rank.
std::vector<GemmShape> micro_batch_gemms(const PlanLayout& layout, int layers, bool head);

struct StepTime {
  double step_s = 0;
  double compute_fwd_s = 0, compute_bwd_s = 0, recompute_s = 0;  // per step (all micro-steps)
  double gemm_s = 0, attention_s = 0, elementwise_s = 0;         // their split (per step)
  std::map<std::string, double> comm_s;                          // per class, before overlap
  std::map<std::string, double>
      comm_exposed_s;     // per class: dp_grads, zero3_gather, weight_gather, sp, tp, pp, scalars
  double slowdown_s = 0;  // compute inflation while hidden communication ran
  double quantize_s = 0;  // encoding and decoding the compressed collectives
  double bubble_s = 0, optimizer_s = 0;
  double tokens_per_s = 0, mfu = 0;
  double gemm_rate = 0;                         // FLOP/s per rank the MFU divides by
  std::vector<std::string> measured, declared;  // which inputs were measured and which declared
  nlohmann::json to_json() const;
};

// What one record puts on each physical level (§6.2): bytes over each device's intra-node link, bytes
// through each node's inter-node injection, and the algorithm's steps (all, and those crossing nodes).
struct Crossing {
  double intra_per_device = 0, inter_per_node = 0, steps = 0, steps_inter = 0;
};
Crossing crossing_bytes(const CommRecord& r);

// Seconds of one collective record on the cluster (α-β per level, §6.2).
double collective_seconds(const CommRecord& r, const Cluster& cluster);

StepTime step_time(const PlanLayout& layout, const std::vector<CommRecord>& records, const Cluster& cluster,
                   int rank);

// Seconds the slowest stage idles in one step's pipeline (planner.md §6.4, tensor-pipeline-parallelism.md
// §3.8), from one micro-batch's forward t_f and backward t_b on a rank (all its chunks), of which t_w
// are the weight gradients: GPipe and 1F1B (P - 1)(t_f + t_b); interleaved over v chunks per rank
// (P - 1)(t_f + t_b) / v; zb1 (ZB-H1) fills the bubble with deferred weight gradients,
// (P - 1) max(t_f, t_i, t_f + t_i - t_w) with t_i = t_b - t_w (the spec's (P - 1)(t_f + t_i - t_w) when
// t_w <= min(t_f, t_i)). m >= P (the regime the engine's schedules run).
double pipeline_bubble_seconds(PipelineSchedule schedule, int P, int v, double t_f, double t_b, double t_w);

// FLOP/s of one GEMM shape per rank on the cluster: measured rates (nearest shapes in log space) or the
// declared peak times its efficiency step function. `how` says which.
double gemm_rate(const Cluster& cluster, const std::string& dtype, int64_t m, int64_t n, int64_t k,
                 int ranks_per_node, std::string* how = nullptr);

}  // namespace odyssey
