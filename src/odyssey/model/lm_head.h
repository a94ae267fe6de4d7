// The LM head and its cross-entropy, fused and chunked over tokens (long-context-memory.md §4.4),
// written once for every architecture (tied or untied head): for each chunk of up to `chunk` rows,
//   logits [m, V] = x W^T;  losses = cross-entropy(logits, targets)
// and, in training (dloss > 0), in the same pass while the block exists:
//   dlogits = dloss (softmax - onehot);  dx [m, C] = dlogits W (accumulated);  dW += dlogits^T x.
// Only one [chunk, V] block of logits exists. A chunk covering all N rows issues exactly the GEMMs of
// the unchunked head, so it gives the same bits.
//
// The head is a column linear (the linear seam, linear_ops.h) followed by the vocabulary seam's
// cross-entropy (vocab_ops.h), so under tensor parallelism it is Megatron's vocab-parallel head: each
// rank holds W's rows of its vocabulary shard and its logit columns, and the loss is exact without
// gathering [n, V]. Chunks count the residual rows this rank holds (R = rows(N)); under TP-SP a chunk
// of m of them is gathered into t m tokens (rank q's m rows, in rank order) before the GEMM.
#pragma once

#include <vector>

#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/vocab_ops.h"

namespace odyssey {

struct LmHeadArgs {
  const float* x;       // [R, C] the final norm's output
  const float* w;       // [rows(V), C] the head (GPT-2: the tied token embedding)
  const int* targets;   // [N] the group's tokens; < 0: ignored (loss 0, gradient 0)
  float* losses;        // [N] out (every token of the group)
  float* block;         // [chunk N / R, rows(V)] scratch: the chunk's logits (dlogits in training)
  float* dx = nullptr;  // [R, C] accumulated into (training)
  float* dw = nullptr;  // [rows(V), C] accumulated into (training)
  int N = 0, C = 0, V = 0, chunk = 0;
  int layer_chunk = 0;  // the layers' rows per chunk: which tokens a TP-SP rank's rows hold (tp_sp_token)
  float dloss = 0;      // each counted token's loss weight; 0: forward only
};

// Rows of the logits block for chunks of `chunk` residual rows: chunk x the tokens per residual row.
inline int64_t lm_head_block_rows(int chunk, const TpSplit& split) {
  return int64_t(chunk) * (split.sequence_parallel ? split.t : 1);
}

void lm_head_loss(const LmHeadArgs& a, LinearOps& linears, VocabOps& vocab, OpObserver* observer);

}  // namespace odyssey
