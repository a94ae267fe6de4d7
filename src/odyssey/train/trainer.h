// The training loop: data -> micro-batches -> forward/backward -> clip -> AdamW -> metrics and
// checkpoints. Global batch semantics are layout-independent (DESIGN.md): optimizer step s consumes
// rows [s*global_batch, (s+1)*global_batch) of the run, whatever the parallel layout: data-parallel
// rank r takes rows [r*micro_batch, (r+1)*micro_batch) of each micro-step's micro_batch x dp rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/data/dataset.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/train/config.h"

namespace odyssey {

struct TrainResult {
  int64_t steps = 0;               // optimizer steps completed (including resumed ones)
  double last_loss = 0;            // training loss of the last step
  double val_loss = -1;            // final validation loss (-1: no val data)
  double tokens_per_s = 0;         // mean over the steps of this invocation
  std::string checkpoint;          // the final checkpoint written
  std::vector<double> losses;      // training loss of every step of this invocation (global mean)
  bool stopped_by_signal = false;  // SIGTERM/SIGINT: stopped early after saving the checkpoint
};

// Trains over every rank of world (collective; only world rank 0 writes metrics, console lines and
// checkpoints). The layout comes from [parallel]; the ZeRO stage from parallel.zero_stage.
TrainResult run_training(const RunConfig& config, Communicator& world);
// The same on one rank (a single-rank communicator, no MPI).
TrainResult run_training(const RunConfig& config);

// Sets OpenMP threads (0: leave the default).
void set_threads(int threads);

}  // namespace odyssey
