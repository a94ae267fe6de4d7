// Linear layer y = x W^T + b, weights stored [OC, C] (as nn.Linear; Hugging Face's Conv1D layout
// [C, OC] is converted at import/export).
#pragma once

#include <cstdint>

namespace odyssey {

// ld_out: the row stride of out / dout (floats) when their rows are wider than OC (the LM head's padded
// logits block, model/lm_head.h); 0: OC.

// inp [N, C], weight [OC, C], bias [OC] or null -> out [N, OC]
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                    int OC, int64_t ld_out = 0);

// dinp [N, C] = dout W (overwritten: nothing else adds to an input gradient here, and a zeroing pass
// before an accumulating GEMM costs a write of the buffer); dweight [OC, C] += dout^T inp and
// dbias [OC] += sum_n dout accumulate (over micro-steps and chunks). dinp or dbias may be null (not
// needed). Exactly the three calls below, in this order.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);

// The pieces of linear_backward, for callers that time each one (the block's op observer).
// dinp [N, C] = dout [N, OC] @ weight [OC, C]
void linear_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC,
                           int64_t ld_out = 0);
// dweight [OC, C] += dout^T [OC, N] @ inp [N, C]
void linear_backward_weight(float* dweight, const float* dout, const float* inp, int N, int C, int OC,
                            int64_t ld_out = 0);
// dbias [OC] += column sums of dout [N, OC], in a fixed order (deterministic).
void linear_backward_bias(float* dbias, const float* dout, int N, int OC, int64_t ld_out = 0);

}  // namespace odyssey
