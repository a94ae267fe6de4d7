// RMSNorm over the last dimension (Llama): y = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps),
// saving rstd for backward. Computed in fp32 in Hugging Face's order (normalise, then scale).
#pragma once

#include "odyssey/kernels/norm_grad_sums.h"

namespace odyssey {

// inp [N, C] -> out [N, C]; rstd [N] saved for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);

// Accumulates into dinp [N, C] and dweight [C] (as layernorm_backward does). With g = dout * weight
// and r = rstd: dinp += r g - x r^3 mean(g x); dweight += dout (x r) summed over rows.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

// rmsnorm_backward over rows that arrive in consecutive pieces (as layernorm_backward_rows): sums
// (width C) holds dweight until sums.finish(dweight), bitwise what one call over all the rows adds.
void rmsnorm_backward_rows(float* dinp, NormGradSums& sums, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int n, int C);

}  // namespace odyssey
