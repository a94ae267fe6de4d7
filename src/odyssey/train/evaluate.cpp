#include "odyssey/train/evaluate.h"

#include <vector>

#include "odyssey/parallel/reductions.h"

namespace odyssey {

double evaluate(PipelineRunner& runner, BatchLoader& loader, uint64_t rows, int dp_rank, int dp_size,
                Communicator& dp_sp, Communicator* pp) {
  const int B = loader.rows(), Tl = loader.local_len();
  std::vector<int> inputs(size_t(B) * Tl), targets(size_t(B) * Tl);
  const uint64_t per_round = uint64_t(B) * uint64_t(dp_size);
  const int rounds = int((rows + per_round - 1) / per_round);
  int loaded = -1;  // the round in the buffers (the runner asks for each round once per stage)
  LossSum local;
  local.sum = runner.run_forward(
      [&](int j) {
        if (j != loaded) {
          loader.load_rows(uint64_t(j) * per_round + uint64_t(dp_rank) * uint64_t(B), rows, inputs.data(),
                           targets.data());
          loaded = j;
        }
        return PipelineMicroBatch{inputs.data(), targets.data(), loader.positions(), B, Tl};
      },
      rounds, &local.count);
  return global_mean_loss(dp_sp, local, pp);
}

}  // namespace odyssey
