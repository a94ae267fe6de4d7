// GPT-2, exactly as Hugging Face's GPT2LMHeadModel: learned positions, pre-LayerNorm (eps 1e-5),
// tanh GELU, tied input/output embeddings, biases everywhere. A GPT2 is one stage (model/stage.h): by
// default the whole model, or a range of its layers for pipeline parallelism. The layers are
// model/gpt2_block.h; this class adds the embeddings, the final norm, the tied LM head and the loss,
// and runs them over activations the caller owns.
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

#include <cstdint>
#include <memory>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/config.h"
#include "odyssey/model/gpt2_block.h"
#include "odyssey/model/gpt2_params.h"
#include "odyssey/model/layer_loop.h"
#include "odyssey/model/layer_stage.h"
#include "odyssey/model/params.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// Activations of one micro-batch, kept for backward (LayeredActivations); the final norm's parameters
// are a LayerNorm's weight and bias [2C].
struct Gpt2Activations : LayeredActivations<Gpt2LayerActs, Gpt2BlockScratch> {
  // For the layers of `range` (resolved) and, with the head, the final norm and logits.
  // split: the layers' tensor-parallel split (rows of the logits block: vocab_rows).
  void allocate(const ModelConfig& config, const StageRange& range, int B, int T, bool shared_qkv = false,
                const MemoryOptions& memory = {}, const TpSplit& split = {}, int64_t vocab_rows = 0,
                const QueryChunks& query_chunks = {});
  size_t bytes() const override;
  // What allocate(config, range, B, T, shared_qkv, memory, split, vocab_rows, query_chunks) would hold,
  // without allocating.
  static size_t bytes_for(const ModelConfig& config, const StageRange& range, int B, int T,
                          bool shared_qkv = false, const MemoryOptions& memory = {},
                          const TpSplit& split = {}, int64_t vocab_rows = 0,
                          const QueryChunks& query_chunks = {});
};
using Activations = Gpt2Activations;

class GPT2 : public LayerStage {
 public:
  // allocate_storage=false: no full parameter/gradient buffers (see Stage::owns_storage). range: the
  // layers this stage holds (default: all, with the embeddings and the head). tp: the tensor-parallel
  // piece held (default: whole tensors).
  explicit GPT2(const ModelConfig& config, bool allocate_storage = true, const StageRange& range = {},
                const TpPiece& tp = {});

  const Gpt2Params& names() const { return names_; }

  std::unique_ptr<StageActivations> make_activations() const override;
  void forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions, int B,
               int T) override;
  double loss(StageActivations& acts, float dloss, int64_t* count) override;
  void backward(StageActivations& acts) override;
  Logits logits(const StageActivations& acts) const override;
  std::unique_ptr<Decoder> make_decoder(int max_tokens) const override;
  using Stage::forward;
  using Stage::logits;

  size_t activation_bytes_for(int B, int T) const override {
    return activation_bytes_of<Gpt2Activations>(B, T);
  }

 private:
  BlockShape shape(const Gpt2Activations& a) const {
    return {a.B, a.T, config_.d_model, config_.n_head, a.layer_chunk, a.query_chunks};
  }

  Gpt2Params names_;  // views into table_
};

// Model FLOPs per token for a training step (forward + backward) at sequence length T:
// 6 * (parameters in matmuls) + 6 * n_layer * d_model * T for causal attention (QK^T and PV, the
// masked half not counted). Used for MFU.
double training_flops_per_token(const ModelConfig& config, int T);

}  // namespace odyssey
