// The optimizer seam: an update over a flat range of a rank's local parameters (a ZeRO shard or the
// whole buffer). The update of element i depends only on element i, so any sharding of the buffer
// gives the same numbers. The optimizer owns the rule, not the storage: the caller (ZeroEngine) keeps
// one buffer per state_names() entry, the size of its local parameters, and shards and checkpoints it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace odyssey {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Its per-element state buffers, by the names checkpoints store them under (AdamW: "m", "v").
  virtual const std::vector<std::string>& state_names() const = 0;
  // One step over n elements: params[0..n) and each state[k][0..n) updated from grads * grad_scale
  // (gradient clipping). step is 1-based; decay: this range takes weight decay.
  virtual void update(float* params, const float* grads, float* const* state, size_t n, float lr,
                      int64_t step, float grad_scale, bool decay) const = 0;
};

}  // namespace odyssey
