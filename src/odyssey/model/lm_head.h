// The final norm, the LM head and its cross-entropy, fused and chunked over tokens
// (long-context-memory.md §4.4), written once for every architecture (LayerNorm or RMSNorm, tied or
// untied head): for each chunk of up to `chunk` rows of the last layer's output x,
//   n [m, C] = norm(x);  logits [m, V] = n W^T;  losses = cross-entropy(logits, targets)
// and, in training (dloss > 0), in the same pass while the block exists:
//   dlogits = dloss (softmax - onehot);  dn [m, C] = dlogits W;  dW += dlogits^T n;
//   dx [m, C] = norm_backward(dn) (the norm's weight gradients summed in FinalNorm::sums).
// Only one [chunk, V] block of logits (rows padded to logits_row_stride) and one chunk of the norm's output
// exist: no [N, C] norm output is kept. A chunk covering all N rows issues exactly the GEMMs of the unchunked
// head, and the norm runs row by row with its weight gradients summed as one call over all rows would
// (NormGradSums), so any chunk gives the bits of the unchunked norm and head. x is copied chunk by chunk
// before dx is written, so x and dx may be the same buffer (the disk tier hands the head d(x) in x's place).
//
// The head is a column linear (the linear seam, linear_ops.h) followed by the vocabulary seam's
// cross-entropy (vocab_ops.h), so under tensor parallelism it is Megatron's vocab-parallel head: each
// rank holds W's rows of its vocabulary shard and its logit columns, and the loss is exact without
// gathering [n, V]. Chunks count the residual rows this rank holds (R = rows(N)); under TP-SP a chunk
// of m of them is gathered into t m tokens (rank q's m rows, in rank order) before the GEMM.
#pragma once

#include <algorithm>

#include <vector>

#include "odyssey/kernels/norm_grad_sums.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/vocab_ops.h"

namespace odyssey {

// The final norm run per chunk, and its chunk buffers.
struct FinalNorm {
  const float* weight = nullptr;  // [C]
  const float* bias = nullptr;    // [C] LayerNorm; null: RMSNorm
  float eps = 1e-5f;
  NormGradSums* sums = nullptr;  // training: its weight gradients (width 2C LayerNorm, C RMSNorm)
  float *x = nullptr, *n = nullptr, *dn = nullptr;  // [chunk, C] the chunk's input, output, d(output)
  float *mean = nullptr, *rstd = nullptr;           // [chunk] (mean: LayerNorm only)
};

// Floats of the chunk buffers a FinalNorm of `chunk` rows uses.
inline size_t final_norm_floats(int chunk, int C) {
  return size_t(chunk) * (3 * size_t(C) + 2);
}

struct LmHeadArgs {
  const float* x;  // [R, C] the last layer's output (the final norm's input)
  FinalNorm norm;
  const float* w;        // [rows(V), C] the head (GPT-2: the tied token embedding)
  const int* targets;    // [N] the group's tokens; < 0: ignored (loss 0, gradient 0)
  float* losses;         // [N] out (every token of the group)
  float* block;          // [chunk N / R, rows(V)] scratch: the chunk's logits (dlogits in training), rows
  int64_t block_ld = 0;  // floats apart (>= rows(V)); 0: logits_row_stride(rows(V))
  float* dx = nullptr;   // [R, C] d(x), written (training; may be x itself)
  float* dw = nullptr;   // [rows(V), C] accumulated into (training)
  int N = 0, C = 0, V = 0, chunk = 0;
  int layer_chunk = 0;  // the layers' rows per chunk: which tokens a TP-SP rank's rows hold (tp_sp_token)
  float dloss = 0;      // each counted token's loss weight; 0: forward only
};

// Rows of the logits block for chunks of `chunk` residual rows: chunk x the tokens per residual row.
// Residual rows per chunk of the head over N rows: memory.head_chunk_tokens, or all N when 0.
inline int lm_head_rows(int N, int head_chunk_tokens) {
  return head_chunk_tokens > 0 ? std::min(N, head_chunk_tokens) : N;
}

inline int64_t lm_head_block_rows(int chunk, const TpSplit& split) {
  return int64_t(chunk) * (split.sequence_parallel ? split.t : 1);
}

// The logits block's row stride for Vr vocabulary columns: Vr rounded up to 16 floats (64 bytes). The
// head's three GEMMs stream the block, and oneDNN ran them at 0.55-0.9 of this rate with GPT-2's odd
// V = 50257 as the stride (the weight gradient dW += dlogits^T n slowest). The padding columns are
// never read (the native bf16 linears write zeros there, model/bf16_linears.cpp).
inline int64_t logits_row_stride(int64_t Vr) {
  return (Vr + 15) / 16 * 16;
}

// Floats of the head's buffers for chunks of `chunk` residual rows: the logits block [chunk G, Vr] (rows
// logits_row_stride(Vr) apart) and the final norm's chunk buffers after it.
inline size_t lm_head_floats(int chunk, const TpSplit& split, int64_t Vr, int C) {
  return size_t(lm_head_block_rows(chunk, split)) * size_t(logits_row_stride(Vr)) +
         final_norm_floats(chunk, C);
}
// Whether a stage whose residual stream holds R rows runs its head in the layers' backward scratch
// (at least R x C floats, idle while the head runs: the blocks' head_grad()) instead of buffers of
// its own: when the head's buffers fit there (long sequences).
inline bool lm_head_borrows_scratch(size_t head_floats, size_t R, int C) {
  return head_floats <= R * size_t(C);
}

// Places the head's buffers in `buffers` (lm_head_floats of them): returns the logits block (first)
// and points the final norm f's chunk buffers after it (mean only for a LayerNorm: f.bias set).
inline float* place_lm_head(float* buffers, FinalNorm& f, int chunk, const TpSplit& split, int64_t Vr,
                            int C) {
  float* n = buffers + size_t(lm_head_block_rows(chunk, split)) * size_t(logits_row_stride(Vr));
  const size_t m = size_t(chunk) * size_t(C);
  f.x = n, f.n = n + m, f.dn = n + 2 * m, f.rstd = n + 3 * m, f.mean = f.bias ? n + 3 * m + chunk : nullptr;
  return buffers;
}

void lm_head_loss(const LmHeadArgs& a, LinearOps& linears, VocabOps& vocab, OpObserver* observer);

}  // namespace odyssey
