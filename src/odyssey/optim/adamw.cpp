#include "odyssey/optim/adamw.h"

#include <cmath>

namespace odyssey {

const std::vector<std::string>& AdamW::state_names() const {
  static const std::vector<std::string> names = {"m", "v"};
  return names;
}

namespace {

// The one AdamW loop. kReference divides by the bias corrections per element, as the formula is
// written; otherwise they are reciprocals computed once. The loop is bound by its divisions, not by
// memory: two fewer per element took 38.6M parameters from ~70 to ~47 ms on two Zen 5 cores (both
// x86-64-v3 and AVX-512 builds; bench_kernels' "adamw").
template <bool kReference>
void adamw_loop(float* params, const float* grads, float* m, float* v, size_t n, const AdamWConfig& c,
                float lr, int64_t step, float grad_scale, bool decay) {
  const float b1 = c.beta1, b2 = c.beta2;
  const float bc1 = 1.0f - std::pow(b1, float(step));
  const float bc2 = 1.0f - std::pow(b2, float(step));
  const float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
  const float wd = decay ? c.weight_decay : 0.0f;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float g = grads[i] * grad_scale;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat, vhat;
    if constexpr (kReference)
      mhat = mi / bc1, vhat = vi / bc2;
    else
      mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    params[i] -= lr * (mhat / (std::sqrt(vhat) + c.eps) + wd * params[i]);
  }
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, const AdamWConfig& c,
                  float lr, int64_t step, float grad_scale, bool decay) {
  adamw_loop<false>(params, grads, m, v, n, c, lr, step, grad_scale, decay);
}

void adamw_update_reference(float* params, const float* grads, float* m, float* v, size_t n,
                            const AdamWConfig& c, float lr, int64_t step, float grad_scale, bool decay) {
  adamw_loop<true>(params, grads, m, v, n, c, lr, step, grad_scale, decay);
}

}  // namespace odyssey
