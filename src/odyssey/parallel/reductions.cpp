#include "odyssey/parallel/reductions.h"

#include <cmath>

#include "odyssey/optim/grad_clip.h"

namespace odyssey {

void sum_in_rank_order(Communicator& group, std::span<double> values) {
  const size_t n = values.size();
  std::vector<double> all(n * size_t(group.size()));
  group.all_gather(values.data(), all.data(), n * sizeof(double), DType::u8);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < group.size(); ++r) sum += all[size_t(r) * n + i];
    values[i] = sum;
  }
}

double global_mean_loss(Communicator& group, const LossSum& local, Communicator* across) {
  // The count travels as a double: exact below 2^53 tokens.
  double v[2] = {local.sum, double(local.count)};
  sum_in_rank_order(group, v);
  if (across) sum_in_rank_order(*across, v);
  return v[1] > 0 ? v[0] / v[1] : 0.0;
}

double global_grad_norm(const std::vector<GradNormPart>& parts) {
  double total = 0;
  for (const GradNormPart& part : parts) {
    double sq = sum_of_squares(part.grads.data(), part.grads.size());
    if (part.group) sum_in_rank_order(*part.group, {&sq, 1});
    total += sq;
  }
  return std::sqrt(total);
}

}  // namespace odyssey
