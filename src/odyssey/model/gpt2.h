// GPT-2, exactly as Hugging Face's GPT2LMHeadModel: learned positions, pre-LayerNorm (eps 1e-5), tanh
// GELU, tied input/output embeddings, biases everywhere. A GPT2 is one block stage (model/block_stage.h):
// by default the whole model, or a range of its layers for pipeline parallelism. GPT-2 is its block
// description (gpt2_block()), its parameter table (gpt2_params.h) and this class.
//
// The model owns no communication. Parallel code changes how it runs through the stage seam: the
// AttentionOp (Ulysses, ring) and the LayerHooks around each unit use (ZeRO-3 gathers, gradient
// reduction), in the order of unit_schedule(). For the whole model (units: 0 embeddings, 1 + l layer l,
// L + 1 final norm):
//   forward:  0 embeddings, 1 + l each layer l = 0 .. L-1, L + 1 final norm, 0 LM head (tied to wte)
//   backward: 0 LM head (unit 0 stays acquired until after the embedding backward), L + 1 final
//             norm, 1 + l each layer l = L-1 .. 0
// A stage's units are numbered from 0 in the same order over what it holds; a last stage without the
// embeddings keeps the tied head's wte in its final unit.
//
// The final norm, the LM head and the loss are fused and chunked over tokens (long-context-memory.md
// §4.4, lm_head.h): loss() normalizes head_chunk_tokens rows of the last layer's output at a time and
// computes their logits, cross-entropy and, in training, their gradient at once (d(last layer output),
// the tied embedding's gradient, the LM head's backward use of unit 0 beginning there, and the final
// norm's weight gradients, which backward() adds at the final norm's backward use), so only one
// [chunk, V] block of logits and one chunk of the norm's output ever exist. The final norm's forward
// use (forward()) takes a copy of its weight and bias for loss(). A chunk covering the whole
// micro-batch computes exactly the unchunked norm and head.
#pragma once

#include "odyssey/model/block_stage.h"
#include "odyssey/model/gpt2_params.h"

namespace odyssey {

// GPT-2's block: LayerNorm, biases on every linear, tanh GELU, no RoPE.
const BlockSpec& gpt2_block();

class GPT2 : public BlockStage {
 public:
  // allocate_storage=false: no full parameter/gradient buffers (see Stage::owns_storage). range: the
  // layers this stage holds (default: all, with the embeddings and the head). tp: the tensor-parallel
  // piece held (default: whole tensors).
  explicit GPT2(const ModelConfig& config, bool allocate_storage = true, const StageRange& range = {},
                const TpPiece& tp = {});
};

// Model FLOPs per token for a training step (forward + backward) at sequence length T:
// 6 * (parameters in matmuls) + 6 * n_layer * d_model * T for causal attention (QK^T and PV, the
// masked half not counted). Used for MFU.
double training_flops_per_token(const ModelConfig& config, int T);

}  // namespace odyssey
