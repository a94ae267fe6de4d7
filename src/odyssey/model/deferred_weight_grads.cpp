#include "odyssey/model/deferred_weight_grads.h"

#include <algorithm>

namespace odyssey {

void DeferredWeightGrads::record(float* dW, const float* dy, const float* x, const LinearCall& c) {
  const size_t i = 2 * gemms_.size(), ny = size_t(c.n) * size_t(c.out), nx = size_t(c.n) * size_t(c.in);
  if (operands_.size() < i + 2) operands_.resize(i + 2);
  // dy is kept dense, whatever its row stride (a strided logits block).
  float* dy_kept = operands_[i].at_least(ny);
  const size_t ld = c.ld_out > 0 ? size_t(c.ld_out) : size_t(c.out);
  for (int64_t r = 0; r < c.n; ++r)
    std::copy_n(dy + size_t(r) * ld, c.out, dy_kept + size_t(r) * size_t(c.out));
  std::copy_n(x, nx, operands_[i + 1].at_least(nx));
  LinearCall dense = c;
  dense.ld_out = 0;
  gemms_.push_back({dW, dense});
  bytes_ += (ny + nx) * sizeof(float);
}

void DeferredWeightGrads::run() {
  for (size_t g = 0; g < gemms_.size(); ++g)
    observed_backward_weight(gemms_[g].call, gemms_[g].dW, operands_[2 * g].data(),
                             operands_[2 * g + 1].data());
  gemms_.clear();
  bytes_ = 0;
}

}  // namespace odyssey
