// Pipeline parallelism's runtime: runs one optimizer step's micro-batches through this pp rank's
// stages by its action table (pipeline_schedule.h). An F of a stage without the embeddings receives
// its input hidden states from the previous stage's rank; an F of a stage without the head sends its
// output on; the last stage's F is followed by its loss (each token weighted by dloss = 1 / the
// step's counted tokens, spec §3.3). A B receives d(output) from the next stage's rank and sends
// d(input) back. Sends are asynchronous: a micro-batch's buffers are reused only once its send has
// completed, and no send is ever waited for before a receive (above the eager limit a send completes
// only when received, and its receiver may be waiting for this rank); receives block, and the time
// they block is the measured bubble. Weight gradients accumulate in the stages in increasing
// micro-batch order, so a pipeline alone reproduces single-process gradient accumulation bit for bit
// (a tied embedding's two copies excepted: their sum, pipeline_grads.h, is exact only to rounding).
//
// zb1 splits each B: its I is a B whose linears record their weight GEMMs (with copies of the GEMM
// operands, model/deferred_weight_grads.h) instead of running them, so the micro-batch's activations
// are released at once and d(input) goes upstream without waiting for the weight gradients; its W runs
// the recorded GEMMs later, oldest first (each weight still accumulates in micro-batch order: bitwise
// the other schedules' gradients). The recorded operands count as the micro-batch's in-flight memory
// until its W. The chunk's last W ends the step's last micro-step of its engine, where every unit's
// gradients are complete: ZeRO 0-1 only (ZeRO 2-3 reduce each micro-batch's gradients as its backward
// finishes, refused).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/deferred_weight_grads.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/zero.h"

namespace odyssey {

// One micro-batch: [B, T] token ids and targets, [T] positions (null: 0..T-1).
struct PipelineMicroBatch {
  const int* inputs;
  const int* targets;
  const int* positions;
  int B, T;
  int index = 0;  // the micro-batch's number in the step (set by the runner)
};

class PipelineRunner {
 public:
  // pp: the pipeline group (rank r of P); chunks[c] is stage c P + r (not owned; outlive the runner).
  PipelineRunner(Communicator& pp, std::vector<Stage*> chunks, const PipelineShape& shape,
                 PipelineSchedule schedule);

  // The gradient engines of the chunks (engines[c] over chunks[c]; none: gradients only accumulate):
  // every B is one micro-step of its chunk's engine, the chunk's last B the step's last, so the
  // engine reduces (and ZeRO-2/3 reduce-scatters) exactly as in a step without a pipeline.
  void set_engines(std::vector<ZeroEngine*> engines);

  // Runs every action of one step. Returns the sum of the counted tokens' losses of the micro-batches
  // (on the rank holding the last stage; 0 elsewhere) and their count in *count.
  double run(const std::function<PipelineMicroBatch(int)>& micro_batch, float dloss, int64_t* count);
  // Forwards only (evaluation), of m micro-batches (any m): each rank runs its stages' forwards in
  // (micro-batch, chunk) order, which every dependency follows, so no rank waits on a later one.
  // Returns the loss sum and count as run() does.
  double run_forward(const std::function<PipelineMicroBatch(int)>& micro_batch, int m, int64_t* count);

  double wait_seconds() const { return wait_s_; }        // blocked in receives during the last run
  double compute_seconds() const { return compute_s_; }  // in the stages' forward/loss/backward
  double run_seconds() const { return run_s_; }          // the whole of the last run
  // compute_seconds() by action kind (indexed by PipeAction::Kind; a forward includes its loss).
  const std::array<double, 4>& compute_seconds_by_kind() const { return compute_by_kind_; }
  // The schedule's idle fraction in the unit-time simulation with t_F = 1, t_B = 2 (t_I = t_W = 1):
  // what the action table alone costs, independent of the machine's load.
  double unit_cost_bubble() const { return unit_cost_bubble_; }
  // Micro-batch stages held at once during the last run, and their activation bytes then (with the
  // received hidden states and gradients).
  int peak_in_flight() const { return peak_in_flight_; }
  size_t peak_activation_bytes() const { return peak_bytes_; }
  const std::vector<PipeAction>& actions() const { return actions_; }
  // The disk tier's traffic so far of every activation set the runner keeps (memory.tier = disk).
  OffloadStats offload() const;

 private:
  struct InFlight {
    std::unique_ptr<StageActivations> acts;
    FloatBuffer input;     // received hidden states [B*T, C] (a stage without the embeddings)
    FloatBuffer out_grad;  // received d(output) [B*T, C] (a stage without the head)
    RequestPtr send;       // the output (forward) or d(input) (backward) on its way
  };
  using Deferred = std::unique_ptr<DeferredWeightGrads>;

  InFlight& slot(int chunk, int mb);
  void release(int chunk, int mb);
  void forward(int stage, const PipelineMicroBatch& mb, float dloss, double* loss, int64_t* counted);
  // B (later null) or I (the weight GEMMs recorded in *later) of stage for micro-batch mb.
  void backward(int stage, const PipelineMicroBatch& mb, DeferredWeightGrads* later, bool last);
  // W: the GEMMs I recorded; the chunk's last W completes the step's gradients (last).
  void weight(int stage, int mb, bool last);
  void wait_sends();
  void add_compute(PipeAction::Kind kind, double seconds);
  void track_in_flight();

  Communicator& pp_;
  std::vector<Stage*> chunks_;
  PipelineShape shape_;
  std::vector<PipeAction> actions_;
  std::map<std::pair<int, int>, std::unique_ptr<InFlight>> in_flight_;  // (chunk, mb)
  std::vector<std::vector<std::unique_ptr<InFlight>>> free_;            // per chunk: reusable slots
  std::map<std::pair<int, int>, Deferred> deferred_;                    // (chunk, mb): I done, W pending
  std::vector<Deferred> free_deferred_;                                 // reusable
  std::vector<ZeroEngine*> engines_;
  PipelineSchedule schedule_ = PipelineSchedule::one_f_one_b;  // as built
  double wait_s_ = 0, compute_s_ = 0, run_s_ = 0, unit_cost_bubble_ = 0;
  std::array<double, 4> compute_by_kind_{};
  int peak_in_flight_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace odyssey
