#include "odyssey/model/stage.h"

#include "odyssey/core/error.h"

namespace odyssey {

UnitUses index_unit_uses(const std::vector<UnitUse>& schedule, int units) {
  UnitUses uses;
  uses.forward.assign(size_t(units), {});
  uses.backward.assign(size_t(units), -1);
  for (int i = 0; i < int(schedule.size()); ++i) {
    const UnitUse& use = schedule[size_t(i)];
    if (use.forward)
      uses.forward[size_t(use.unit)].push_back(i);
    else
      uses.backward[size_t(use.unit)] = i;
  }
  return uses;
}

StageRange StageRange::resolved(const ModelConfig& config) const {
  StageRange r = *this;
  if (r.layer_end < 0) r.layer_end = config.n_layer;
  ODY_CHECK(r.layer_begin >= 0 && r.layer_begin < r.layer_end && r.layer_end <= config.n_layer,
            "stage layers [{}, {}) are empty or outside the model's {} layers (model.n_layer)", r.layer_begin,
            r.layer_end, config.n_layer);
  return r;
}

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
