// Softmax + cross-entropy over the vocabulary, fused: probabilities are never stored; the backward
// overwrites the logits with their gradient in place.
#pragma once

#include <cstdint>

namespace odyssey {

// logits [N, V] with rows ld floats apart (0: V; the padding after V columns is never read or written),
// targets [N] (a target < 0 is ignored: loss 0, gradient 0) -> losses [N] (-log p[target]).
void cross_entropy_forward(float* losses, const float* logits, const int* targets, int N, int V,
                           int64_t ld = 0);

// Forward and backward in one pass: losses [N] as above, and logits [N, V] are overwritten with
// dloss * (softmax(logits) - onehot(target)). dloss is the weight of each token's loss in the total
// (1 / number of tokens in the optimizer step, for a mean).
void cross_entropy_forward_backward(float* logits_to_dlogits, float* losses, const int* targets, int N, int V,
                                    float dloss, int64_t ld = 0);

}  // namespace odyssey
