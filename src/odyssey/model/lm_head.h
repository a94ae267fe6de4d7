// The LM head and its cross-entropy, fused and chunked over tokens (long-context-memory.md §4.4),
// written once for every architecture (tied or untied head): for each chunk of up to `chunk` rows,
//   logits [m, V] = x W^T;  losses = cross-entropy(logits, targets)
// and, in training (dloss > 0), in the same pass while the block exists:
//   dlogits = dloss (softmax - onehot);  dx [m, C] = dlogits W (accumulated);  dW += dlogits^T x.
// Only one [chunk, V] block of logits exists. A chunk covering all N rows issues exactly the GEMMs of
// the unchunked head, so it gives the same bits.
#pragma once

#include "odyssey/model/op_observer.h"

namespace odyssey {

struct LmHeadArgs {
  const float* x;       // [N, C] the final norm's output
  const float* w;       // [V, C] the head (GPT-2: the tied token embedding)
  const int* targets;   // [N]; < 0: ignored (loss 0, gradient 0)
  float* losses;        // [N] out
  float* block;         // [chunk, V] scratch: the chunk's logits (dlogits in training)
  float* dx = nullptr;  // [N, C] accumulated into (training)
  float* dw = nullptr;  // [V, C] accumulated into (training)
  int N = 0, C = 0, V = 0, chunk = 0;
  float dloss = 0;  // each counted token's loss weight; 0: forward only
};

void lm_head_loss(const LmHeadArgs& a, OpObserver* observer);

}  // namespace odyssey
