// Validation loss under any layout: the first `rows` rows of the data are split over the data-parallel
// ranks, micro_batch at a time, each row sliced along the sequence as in training; the partial sums
// meet over dp x sp. Every rank runs the same number of forwards (the last ones padded with rows that
// count nothing), since under ZeRO-3 and sequence parallelism a forward is collective.
#pragma once

#include <cstdint>

#include "odyssey/comm/communicator.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/pipeline.h"
#include "odyssey/train/batch_loader.h"

namespace odyssey {

// loader: built with this rank's dp rank/size and sequence shard; dp_sp: the group over which the
// partial sums are added; acts: the activations to run in (the trainer's, so validation allocates
// none of its own). Returns the mean token loss.
double evaluate_distributed(Stage& model, StageActivations& acts, BatchLoader& loader, uint64_t rows,
                            int dp_rank, int dp_size, Communicator& dp_sp);

// The same through a pipeline (parallel.pp > 1): every round of rows is one micro-batch of a
// forward-only pass (PipelineRunner::run_forward); the last stage's sums meet over dp_sp and pp.
double evaluate_pipeline(PipelineRunner& runner, BatchLoader& loader, uint64_t rows, int dp_rank, int dp_size,
                         Communicator& dp_sp, Communicator& pp);

}  // namespace odyssey
