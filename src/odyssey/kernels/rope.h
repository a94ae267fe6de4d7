// Rotary position embedding, rotate-half convention (Hugging Face's Llama): for each head of D dims
// and i < D/2, with angle a = position * inv_freq[i],
//   y[i] = x[i] cos a - x[i + D/2] sin a,   y[i + D/2] = x[i + D/2] cos a + x[i] sin a.
// Positions are explicit per token, so sequence shards (contiguous or zigzag) rotate with their global
// positions. inv_freq and the angle are fp32, as HF forms them (an fp64 angle differs by up to 5e-3
// rad at position 131071).
#pragma once

#include <cstdint>
#include <vector>

namespace odyssey {

// Llama-3 frequency scaling (tensor-pipeline-parallelism.md §5.5); llama3 = false: none.
struct RopeScalingParams {
  bool llama3 = false;
  double factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position_embeddings = 8192;
};

// inv_freq [D/2]: theta^(-2i/D) in fp32, then the Llama-3 adjustment when configured.
std::vector<float> rope_inv_freq(int D, double theta, const RopeScalingParams& scaling);

// cos, sin [N, D/2] of N tokens at positions[N].
void rope_tables(float* cos, float* sin, const int* positions, int N, const float* inv_freq, int D);

// Rotates, in place, `heads` heads of D dims per token; token n's heads start at x + n * row_stride
// (q and k of a fused qkv row are two calls, at offsets 0 and H*D).
void rope_forward(float* x, int64_t row_stride, int N, int heads, int D, const float* cos, const float* sin);
// The inverse rotation (the transpose), in place, on gradients with the same layout.
void rope_backward(float* dx, int64_t row_stride, int N, int heads, int D, const float* cos,
                   const float* sin);

}  // namespace odyssey
