#include "odyssey/optim/adamw.h"

#include <cmath>

namespace odyssey {

const std::vector<std::string>& AdamW::state_names() const {
  static const std::vector<std::string> names = {"m", "v"};
  return names;
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWConfig& c,
                  float lr, int64_t step, float grad_scale, bool decay) {
  const float b1 = c.beta1, b2 = c.beta2;
  const float bc1 = 1.0f - std::pow(b1, float(step));
  const float bc2 = 1.0f - std::pow(b2, float(step));
  const float wd = decay ? c.weight_decay : 0.0f;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float g = grads[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + c.eps) + wd * params[i]);
  }
}

}  // namespace odyssey
