#include "odyssey/model/stage.h"

namespace odyssey {

StageActivations& Stage::own() {
  if (!own_) own_ = make_activations();
  return *own_;
}

double Stage::forward(const int* inputs, const int* targets, const int* positions, int B, int T,
                      int64_t* count) {
  forward(own(), inputs, targets, positions, B, T);
  return loss(own(), 0.0f, count);
}

double Stage::forward_backward(const int* inputs, const int* targets, const int* positions, int B, int T,
                               float dloss, int64_t* count) {
  forward(own(), inputs, targets, positions, B, T);
  const double sum = loss(own(), dloss, count);
  backward(own());
  return sum;
}

}  // namespace odyssey
