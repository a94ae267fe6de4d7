// GELU, tanh form (GPT-2 / Hugging Face "gelu_new"). tanh is our vectorizable one (vec_math.h).
#include "odyssey/kernels/gelu.h"

#include "odyssey/kernels/vec_math.h"

namespace odyssey {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr size_t kGeluParallelMin = size_t{1} << 14;  // a tanh per element: threads pay off sooner
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kGeluParallelMin)
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float t = vtanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kGeluParallelMin)
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float t = vtanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    // d/dx [0.5 x (1 + t)] = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    float dt = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dt;
    dinp[i] = grad * dout[i];
  }
}

}  // namespace odyssey
