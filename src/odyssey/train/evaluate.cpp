#include "odyssey/train/evaluate.h"

#include <vector>

namespace odyssey {

double evaluate_distributed(Stage& model, StageActivations& acts, BatchLoader& loader, uint64_t rows,
                            int dp_rank, int dp_size, Communicator& dp_sp) {
  const int B = loader.rows(), Tl = loader.local_len();
  std::vector<int> inputs(size_t(B) * Tl), targets(size_t(B) * Tl);
  // Partial sums as doubles (the count too: exact below 2^53), added in rank order by the all-reduce.
  double sums[2] = {0.0, 0.0};
  const uint64_t per_round = uint64_t(B) * uint64_t(dp_size);
  for (uint64_t first = 0; first < rows; first += per_round) {
    loader.load_rows(first + uint64_t(dp_rank) * uint64_t(B), rows, inputs.data(), targets.data());
    int64_t n = 0;
    model.forward(acts, inputs.data(), targets.data(), loader.positions(), B, Tl);
    sums[0] += model.loss(acts, 0.0f, &n);
    sums[1] += double(n);
  }
  // Gathered rather than all-reduced so every rank adds the same numbers in the same order.
  std::vector<double> all(2 * size_t(dp_sp.size()));
  dp_sp.all_gather(sums, all.data(), 2 * sizeof(double), DType::u8);
  double sum = 0, count = 0;
  for (size_t r = 0; r < size_t(dp_sp.size()); ++r) sum += all[2 * r], count += all[2 * r + 1];
  return count > 0 ? sum / count : 0.0;
}

}  // namespace odyssey
