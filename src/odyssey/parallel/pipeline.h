// Pipeline parallelism's runtime: runs one optimizer step's micro-batches through this pp rank's
// stages by its action table (pipeline_schedule.h). An F of a stage without the embeddings receives
// its input hidden states from the previous stage's rank; an F of a stage without the head sends its
// output on; the last stage's F is followed by its loss (each token weighted by dloss = 1 / the
// step's counted tokens, spec §3.3). A B receives d(output) from the next stage's rank and sends
// d(input) back. Sends are asynchronous and waited lazily; receives block, and the time they block is
// the measured bubble. Weight gradients accumulate in the stages in increasing micro-batch order, so
// a pipeline alone reproduces single-process gradient accumulation bit for bit (a tied embedding's two
// copies excepted: sum their gradients over the first and last rank, tied_embedding_group).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/pipeline_schedule.h"

namespace odyssey {

// One micro-batch: [B, T] token ids and targets, [T] positions (null: 0..T-1).
struct PipelineMicroBatch {
  const int* inputs;
  const int* targets;
  const int* positions;
  int B, T;
};

class PipelineRunner {
 public:
  // pp: the pipeline group (rank r of P); chunks[c] is stage c P + r (not owned; outlive the runner).
  PipelineRunner(Communicator& pp, std::vector<Stage*> chunks, const PipelineShape& shape,
                 PipelineSchedule schedule);

  // Runs every action of one step. Returns the sum of the counted tokens' losses of the micro-batches
  // (on the rank holding the last stage; 0 elsewhere) and their count in *count.
  double run(const std::function<PipelineMicroBatch(int)>& micro_batch, float dloss, int64_t* count);

  double wait_seconds() const { return wait_s_; }  // blocked in receives during the last run
  const std::vector<PipeAction>& actions() const { return actions_; }

 private:
  struct InFlight {
    std::unique_ptr<StageActivations> acts;
    FloatBuffer input;     // received hidden states [B*T, C] (a stage without the embeddings)
    FloatBuffer out_grad;  // received d(output) [B*T, C] (a stage without the head)
    RequestPtr send;       // the output (forward) or d(input) (backward) on its way
  };

  InFlight& slot(int chunk, int mb);
  void release(int chunk, int mb);

  Communicator& pp_;
  std::vector<Stage*> chunks_;
  PipelineShape shape_;
  std::vector<PipeAction> actions_;
  std::map<std::pair<int, int>, std::unique_ptr<InFlight>> in_flight_;  // (chunk, mb)
  std::vector<std::vector<std::unique_ptr<InFlight>>> free_;            // per chunk: reusable slots
  double wait_s_ = 0;
};

}  // namespace odyssey
