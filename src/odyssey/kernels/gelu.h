// GELU, tanh approximation (GPT-2's "gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cstddef>

namespace odyssey {

void gelu_forward(float* out, const float* inp, size_t n);
// dinp = gelu'(inp) * dout, overwritten (no zeroing pass before it; as swiglu_backward).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

}  // namespace odyssey
