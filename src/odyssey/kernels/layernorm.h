// LayerNorm over the last dimension (eps 1e-5 as GPT-2), saving mean and 1/std for backward.
#pragma once

namespace odyssey {

// inp [N, C] -> out [N, C]; mean [N], rstd [N] saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps = 1e-5f);

// Accumulates into dinp [N, C], dweight [C], dbias [C].
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

}  // namespace odyssey
