// Linear layer y = x W^T + b, weights stored [OC, C] (as nn.Linear; Hugging Face's Conv1D layout
// [C, OC] is converted at import/export).
#pragma once

namespace odyssey {

// inp [N, C], weight [OC, C], bias [OC] or null -> out [N, OC]
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                    int OC);

// Accumulates: dinp [N, C] += dout W; dweight [OC, C] += dout^T inp; dbias [OC] += sum_n dout.
// dinp or dbias may be null (not needed).
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);

}  // namespace odyssey
