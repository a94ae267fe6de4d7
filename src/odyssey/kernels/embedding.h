// Token + position embedding (GPT-2's wte + wpe), or the token embedding alone (wpe null: Llama,
// whose positions enter through RoPE). Positions are explicit per token, so a sequence shard
// (contiguous or zigzag) embeds with its global positions.
#pragma once

namespace odyssey {

// tokens [N], positions [N] -> out [N, C] = wte[tokens] + wpe[positions]
void embedding_forward(float* out, const int* tokens, const int* positions, const float* wte,
                       const float* wpe, int N, int C);

// Accumulates dwte [V, C] and dwpe [maxT, C] (unless null) from dout [N, C]. Deterministic (no atomics).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, const int* positions,
                        int N, int C);

}  // namespace odyssey
