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
#include "odyssey/train/memory_check.h"

namespace odyssey {

struct TrainResult {
  int64_t steps = 0;               // optimizer steps completed (including resumed ones)
  double last_loss = 0;            // training loss of the last step
  double val_loss = -1;            // final validation loss (-1: no val data)
  double tokens_per_s = 0;         // mean over the steps of this invocation
  std::string checkpoint;          // the final checkpoint written
  std::vector<double> losses;      // training loss of every step of this invocation (global mean)
  bool stopped_by_signal = false;  // SIGTERM/SIGINT: stopped early after saving the checkpoint
  HostMemoryNeed memory;           // the start-up memory check's figures (this rank)
  uint64_t host_available = 0;     // MemAvailable when it ran (0: unknown)
  nlohmann::json last_record;      // this rank's metrics record of the last step (every rank: `plan --check`)
};

// Trains over every rank of world (collective; only world rank 0 writes metrics, console lines and
// checkpoints). The layout comes from [parallel]; the ZeRO stage from parallel.zero_stage.
// dry_run: build the layout, check the data and the memory, and return before training or writing
// anything (`odyssey train --dry-run`).
TrainResult run_training(const RunConfig& config, Communicator& world, bool dry_run = false);
// The same on one rank (a single-rank communicator, no MPI).
TrainResult run_training(const RunConfig& config, bool dry_run = false);

// Sets OpenMP threads (0: leave the default).
void set_threads(int threads);

}  // namespace odyssey
