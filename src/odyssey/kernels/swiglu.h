// SwiGLU (Llama's MLP activation): h = silu(gate) * up, silu(a) = a * sigmoid(a). gate and up come from
// one GEMM against the adjacent [gate; up] weights: gate_up [N, 2F], columns [0, F) gate, [F, 2F) up.
#pragma once

namespace odyssey {

// gate_up [N, 2F] -> out [N, F].
void swiglu_forward(float* out, const float* gate_up, int N, int F);

// dgate_up [N, 2F] overwritten from dout [N, F]: with s = sigmoid(a),
// d(gate) = dout * up * s (1 + a (1 - s)), d(up) = dout * silu(a).
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int F);

}  // namespace odyssey
