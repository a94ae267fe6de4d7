// LayerNorm over the last dimension (eps 1e-5 as GPT-2), saving mean and 1/std for backward.
#pragma once

#include "odyssey/kernels/norm_grad_sums.h"

namespace odyssey {

// inp [N, C] -> out [N, C]; mean [N], rstd [N] saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps = 1e-5f);

// Accumulates into dinp [N, C], dweight [C], dbias [C].
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

// layernorm_backward over rows that arrive in consecutive pieces (the fused LM head's chunks): each
// piece accumulates into its dinp rows, and sums (width 2C, started for C) holds dweight and dbias
// until sums.finish(dweight, dbias) adds them, bitwise what one call over all the rows adds.
void layernorm_backward_rows(float* dinp, NormGradSums& sums, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int n, int C);

}  // namespace odyssey
