// Validation loss under any layout, one path: the first `rows` rows of the data are split over the
// data-parallel ranks, micro_batch at a time, each row sliced along the sequence as in training; every
// round of rows is one micro-batch of a forward-only pass through the pipeline's stages
// (PipelineRunner::run_forward; one stage when pp = 1); the last stage's partial sums meet over dp x sp
// and pp. Every rank runs the same number of forwards (the last ones padded with rows that count
// nothing), since under ZeRO-3 and sequence parallelism a forward is collective.
#pragma once

#include <cstdint>

#include "odyssey/comm/communicator.h"
#include "odyssey/parallel/pipeline.h"
#include "odyssey/train/batch_loader.h"

namespace odyssey {

// loader: built with this rank's dp rank/size and sequence shard; dp_sp: the group over which the
// partial sums are added; pp: the pipeline group (null with one pp rank). The runner runs in its own
// activations (the training step's, so validation allocates none of its own). Returns the mean token
// loss.
double evaluate(PipelineRunner& runner, BatchLoader& loader, uint64_t rows, int dp_rank, int dp_size,
                Communicator& dp_sp, Communicator* pp);

}  // namespace odyssey
