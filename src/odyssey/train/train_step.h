// One optimizer step, written once: the trainer runs it, and the parity tests and benchmarks drive
// this same function (torchtitan's train_step). For each micro-step, this rank's rows go through
// forward, loss and backward between the gradient engine's micro-step hooks (bucketed reductions,
// ZeRO-3 gathers); then the token-mean loss over the ranks holding disjoint tokens, the global
// gradient norm, clipping, and the optimizer's update at the step's learning rate.
#pragma once

#include <cstdint>
#include <memory>

#include "odyssey/comm/communicator.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/pipeline.h"
#include "odyssey/parallel/tp_grads.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/micro_batches.h"

namespace odyssey {

struct StepSettings {
  int micro_steps = 1;  // micro-steps per optimizer step on each rank
  float dloss = 0;      // each token's loss weight: 1 / tokens in the global batch
  float grad_clip = 0;  // maximum global gradient norm (<= 0: no clipping)
  // Tensor parallelism: its gradient sums and what the norm leaves out (null: none; the pipeline step
  // takes one per chunk in PipelineStep::tp).
  const TpGradients* tp = nullptr;
};

struct StepResult {
  double loss = 0;           // token mean over the global batch
  double grad_norm = 0;      // before clipping
  double pp_wait_ms = 0;     // pipeline: time blocked in receives (the measured bubble)
  double pp_compute_ms = 0;  // pipeline: time in the stages' forward, loss and backward
  double pp_run_ms = 0;      // pipeline: the schedule's whole run on this rank
};

// A rank's part of the step, whatever the layout (train/layout_builder.h builds it; pp = 1 is a
// one-stage pipeline): its stages (model chunks), their engines, the runner over them, and the tied
// embedding's copies.
struct PipelineStep {
  PipelineRunner* runner = nullptr;  // its engines set (set_engines)
  std::vector<ZeroEngine*> engines;  // per chunk
  Communicator* pp = nullptr;        // the pipeline group (null with one pp rank)
  Communicator* embd = nullptr;      // the tied copies' group (null: no tied copy on this rank)
  std::vector<Range> tied;           // per chunk: the tied copy's dense range (empty: none)
  std::vector<Range> norm_skip;      // per chunk: left out of the norm (the last stage's tied copy)
  std::vector<TpGradients> tp;       // per chunk under tensor parallelism (empty: none)
  FloatBuffer scratch;               // the tied copies' sum, kept from step to step
};

// The step the trainer runs: the step's micro-batches run by the runner's schedule (each backward one
// micro-step of its chunk's engine), then the tied copies summed over embd, the loss over loss_group
// and pp, the norm over every stage, clipping and every engine's update. step: 0-based (the optimizer
// sees step + 1). loss_group: the ranks holding disjoint tokens (dp x sp). observer: times the step's
// own phases ("memset.zero_grads", "optim.grad_norm", "optim.update"); the model's ops are observed
// through Stage::set_observer. A loss or norm that is not finite fails naming the step, before any
// parameter changes.
StepResult train_step(PipelineStep& pipe, MicroBatches& data, Communicator& loss_group,
                      const StepSettings& settings, int64_t step, float lr, OpObserver* observer = nullptr);

// One stage and its engine as a one-stage pipeline of `micro_steps` micro-batches, what the layout
// builder makes for pp = 1, without a layout (the ZeRO parity tests and bench_train drive train_step
// through it).
struct OneStagePipeline {
  OneStagePipeline(Stage& stage, ZeroEngine& engine, int micro_steps);
  SingleCommunicator pp{"pp"};
  std::unique_ptr<PipelineRunner> runner;
  PipelineStep step;
};

}  // namespace odyssey
