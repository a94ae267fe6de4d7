// Today's first attention kernel, kept as the reference the fast kernel (attention.h) is tested
// against: same contract, same arguments, bitwise the same for any thread count. Its 16-float micro
// tiles fit AVX-512's 32 registers but spill on AVX2; attention_forward/backward no longer use it.
#pragma once

#include "odyssey/kernels/attention.h"

namespace odyssey {

void attention_reference_forward(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                                 AttentionDims dims, AttentionMask mask, float scale);

void attention_reference_backward(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout,
                                  HeadsView out, const float* lse, HeadsView q, HeadsView k, HeadsView v,
                                  AttentionDims dims, AttentionMask mask, float scale);

}  // namespace odyssey
