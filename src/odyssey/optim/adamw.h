// AdamW (decoupled weight decay, bias-corrected moments) over a flat range of parameters. The range
// may be a ZeRO shard: the update of element i depends only on element i, and decay is given per
// element range by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/optim/optimizer.h"

namespace odyssey {

struct AdamWConfig {
  float lr = 6e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// One step over n elements. step is 1-based (for bias correction). grad_scale multiplies every
// gradient first (gradient clipping). decay: apply weight decay to this range or not.
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + lr * wd * p
// The bias corrections enter as reciprocals (multiplications), so params may differ from
// adamw_update_reference's by a rounding; m and v are the same bits.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWConfig& config,
                  float lr, int64_t step, float grad_scale, bool decay);
// The same step with the divisions as written: the reference the tests compare adamw_update against.
void adamw_update_reference(float* params, const float* grads, float* m, float* v, size_t n,
                            const AdamWConfig& config, float lr, int64_t step, float grad_scale, bool decay);

// AdamW behind the optimizer seam; its state is the two moments "m" and "v".
class AdamW final : public Optimizer {
 public:
  explicit AdamW(const AdamWConfig& config) : config_(config) {}
  const AdamWConfig& config() const { return config_; }
  const std::vector<std::string>& state_names() const override;
  void update(float* params, const float* grads, float* const* state, size_t n, float lr, int64_t step,
              float grad_scale, bool decay) const override {
    adamw_update(params, grads, state[0], state[1], n, config_, lr, step, grad_scale, decay);
  }

 private:
  AdamWConfig config_;
};

}  // namespace odyssey
