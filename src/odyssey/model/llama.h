// Llama, exactly as Hugging Face's LlamaForCausalLM (tensor-pipeline-parallelism.md §5): token
// embedding, RMSNorm, rotate-half RoPE (optionally with Llama-3 frequency scaling) at each token's
// global position, grouped-query attention, SwiGLU, no biases, a tied or untied LM head. A Llama is one
// stage (model/stage.h, model/layer_stage.h): the whole model or a range of its layers. The layers
// are model/llama_block.h; this class adds the embedding, the RoPE tables, the final norm, the head
// and the loss (the fused chunked head of model/lm_head.h), over activations the caller owns.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/layer_loop.h"
#include "odyssey/model/layer_stage.h"
#include "odyssey/model/llama_block.h"
#include "odyssey/model/llama_params.h"

namespace odyssey {

// Activations of one micro-batch, kept for backward (LayeredActivations), and the RoPE tables; the
// final norm's parameters are an RMSNorm's weight [C].
struct LlamaActivations : LayeredActivations<LlamaLayerActs, LlamaBlockScratch> {
  FloatBuffer rope_cos, rope_sin;  // [N, D/2] at the tokens' positions

  // split and vocab_rows as Gpt2Activations'.
  void allocate(const ModelConfig& config, const StageRange& range, int B, int T, bool shared_qkv,
                const MemoryOptions& memory, const TpSplit& split = {}, int64_t vocab_rows = 0,
                const QueryChunks& query_chunks = {});
  size_t bytes() const override;
  static size_t bytes_for(const ModelConfig& config, const StageRange& range, int B, int T, bool shared_qkv,
                          const MemoryOptions& memory, const TpSplit& split = {}, int64_t vocab_rows = 0,
                          const QueryChunks& query_chunks = {});
};

class Llama : public LayerStage {
 public:
  explicit Llama(const ModelConfig& config, bool allocate_storage = true, const StageRange& range = {},
                 const TpPiece& tp = {});

  const LlamaParams& names() const { return names_; }

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
    return activation_bytes_of<LlamaActivations>(B, T);
  }

 private:
  LlamaShape layer_shape(const LlamaActivations& a) const {
    LlamaShape s = LlamaShape::of(config_, a.B, a.T, a.layer_chunk, split());
    s.query_chunks = a.query_chunks;
    return s;
  }

  LlamaParams names_;            // views into table_
  std::vector<float> inv_freq_;  // [D/2] RoPE inverse frequencies (Llama-3 scaled when configured)
};

// Model FLOPs per token of a training step at sequence length T: 6 x (parameters in matmuls: q, k, v,
// o, gate, up, down per layer and the LM head) + 6 n_layer H D T for causal attention (QK^T and PV
// over the causal half). Used for MFU.
double llama_training_flops_per_token(const ModelConfig& config, int T);

}  // namespace odyssey
