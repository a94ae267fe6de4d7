// The norms and MLP activations an architecture's block description (model/block.h) names, over the
// kernels, each in the signatures the block runner calls. A new norm or activation is one entry here.
#pragma once

#include <cstddef>

#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/rmsnorm.h"
#include "odyssey/kernels/swiglu.h"
#include "odyssey/model/block.h"

namespace odyssey {

namespace block_ops {
inline void rmsnorm(float* y, float*, float* rstd, const float* x, const float* w, const float*, int n, int C,
                    float eps) {
  rmsnorm_forward(y, rstd, x, w, n, C, eps);
}
inline void rmsnorm_back(float* dx, float* dw, float*, const float* dy, const float* x, const float* w,
                         const float*, const float* rstd, int n, int C) {
  rmsnorm_backward(dx, dw, dy, x, w, rstd, n, C);
}
inline void gelu(float* y, const float* u, int n, int width) {
  gelu_forward(y, u, size_t(n) * width);
}
inline void gelu_back(float* du, const float* dy, const float* u, int n, int width) {
  gelu_backward(du, u, dy, size_t(n) * width);
}
}  // namespace block_ops

// LayerNorm: a weight and a bias, per-row mean and rstd (GPT-2).
inline constexpr BlockNorm kLayerNorm = {"layernorm.fwd", "layernorm.bwd", true, layernorm_forward,
                                         layernorm_backward};
// RMSNorm: a weight, per-row rstd (Llama).
inline constexpr BlockNorm kRmsNorm = {"rmsnorm.fwd", "rmsnorm.bwd", false, block_ops::rmsnorm,
                                       block_ops::rmsnorm_back};
// tanh GELU over the up linear's width (GPT-2).
inline constexpr BlockActivation kGelu = {"gelu.fwd", "gelu.bwd", block_ops::gelu, block_ops::gelu_back};
// silu(gate) * up: half the up linear's width (Llama).
inline constexpr BlockActivation kSwiGlu = {"swiglu.fwd", "swiglu.bwd", swiglu_forward, swiglu_backward};

}  // namespace odyssey
