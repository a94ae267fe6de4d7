// The stage of every block architecture (model/stage.h, model/layer_stage.h): the embeddings (token
// rows, and a learned position table when the block says so), the layers through the one block runner
// (model/block_runner.h), RoPE's tables when the block rotates q and k, the final norm (the block's
// norm kind), the LM head (tied or not) and the loss (the fused chunked head of model/lm_head.h), over
// activations the caller owns. An architecture (gpt2.h, llama.h, qwen2.h) is its block description, its
// parameter table and the names of its tensors in that table.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/block.h"
#include "odyssey/model/layer_loop.h"
#include "odyssey/model/layer_stage.h"

namespace odyssey {

// A stage's tensors by role, found in its table (absent ones null: the embeddings without layer 0, the
// final norm and head without the last layer, a LayerNorm's bias for an RMSNorm). head is the embedding
// when tied.
struct StageParams {
  const ParamInfo *embed = nullptr, *positions = nullptr, *norm_w = nullptr, *norm_b = nullptr,
                  *head = nullptr;
  int layer_begin = 0;
  std::vector<BlockParamInfos> layers;
  const BlockParamInfos& layer(int l) const { return layers[size_t(l - layer_begin)]; }
};

// The table of a pipeline stage holding layers `range` (resolved) of an architecture whose whole table
// is `whole`: its units of those layers, the embeddings' unit first when it has them, the final unit
// last when it has the head; a tied head (tied_head: the embedding tensor's name) then holds its own copy
// of the embedding unless the stage also has the embeddings.
ParamTable stage_param_table(const ParamTable& whole, const ModelConfig& config, const StageRange& range,
                             const char* tied_head);

// What every block stage keeps of one micro-batch of B rows x T tokens (N = B*T) between its forward and
// its backward, R = split.rows(N) residual rows (all N, or this rank's TP-SP slice).
struct BlockActivations : StageActivations {
  explicit BlockActivations(const BlockSpec& block) : spec(&block) {}
  const BlockSpec* spec;  // the model's block
  int B = 0, T = 0;
  StageRange range;                      // the layers held (resolved)
  TpSplit split;                         // how the layers are split over tensor parallelism
  bool shared_qkv = false;               // the attention op saves its own qkv: layers keep none
  bool bf16 = false;                     // the layers hold the policy's bf16 tensors in 2 bytes
  QueryChunks query_chunks;              // whether the attention runs per query chunk
  IntBuffer tokens, targets, positions;  // [N] (the tensor-parallel group's tokens)
  FloatBuffer encoded;                   // [R, C] the embeddings' output (with the embeddings)
  FloatBuffer rope_cos, rope_sin;        // [N, D/2] at the tokens' positions (a block with RoPE)
  KeptLayers<BlockActs> kept;            // per layer, as the checkpoint policy keeps them
  // With the head: the final norm's weight [C] (then a LayerNorm's bias [C]), taken at its forward use,
  // and d(those) from loss() until backward().
  FloatBuffer final_norm;
  NormGradSums final_norm_sums;
  FloatBuffer head_own;  // the head's buffers (lm_head_floats: one chunk's logits, dlogits in training, and
                         // the final norm's chunk buffers) unless it borrows the scratch (head_buffers())
  int head_chunk = 0;    // rows per LM-head chunk (N: one chunk)
  int layer_chunk = 0;   // memory.chunk_tokens: rows per token-local chunk of a layer
  bool head_backward_done = false;  // the last loss() ran with dloss: backward() may follow
  FloatBuffer losses;               // [N]
  FloatBuffer dres;                 // [R, C] d(residual stream), carried down through the layers
  BlockScratch scratch;             // shared by the layers

  // For the layers of `range` (resolved) and, with the head, the final norm and logits (rows of the
  // logits block: vocab_rows).
  void allocate(const ModelConfig& config, const StageRange& range, int B, int T, bool shared_qkv = false,
                const MemoryOptions& memory = {}, const TpSplit& split = {}, int64_t vocab_rows = 0,
                const QueryChunks& query_chunks = {});
  size_t bytes() const override;
  // What allocate(config, range, B, T, shared_qkv, memory, split, vocab_rows, query_chunks) would hold
  // with block spec, without allocating.
  static size_t bytes_for(const BlockSpec& spec, const ModelConfig& config, const StageRange& range, int B,
                          int T, bool shared_qkv = false, const MemoryOptions& memory = {},
                          const TpSplit& split = {}, int64_t vocab_rows = 0,
                          const QueryChunks& query_chunks = {});

  // The head's buffers: its own, or on long sequences the scratch's (lm_head_borrows_scratch).
  float* head_buffers() { return head_own.size() ? head_own.data() : scratch.head_grad(); }
  const float* output() const override { return kept.output(int(kept.layers.size()) - 1); }
  OffloadStats offload() const override { return kept.offload(); }
  const float* input_grad() const override { return dres.data(); }
};

// What a block stage holds for one micro-batch, as a pure function of its sizes (no stage, op or buffer
// built): the stage's activation_bytes_for and offload_bytes_for, and the footprint's activations
// (train/footprint.h), are this one function.
struct StageMemory {
  size_t activations = 0;        // the micro-batch's BlockActivations, with the attention op's tensors saved
                                 // in its layers
  size_t attention_scratch = 0;  // the attention op's own scratch (one op per rank, shared by its stages)
  uint64_t offload = 0;          // the disk tier's file of the micro-batch
  size_t deferred = 0;           // zb1: the operands an I records (DeferredWeightGrads): per layer GEMM
                                 // (qkv, proj, up, down) its input and output gradient over the B T tokens
  size_t total() const { return activations + attention_scratch; }
};

// The stage of `spec` holding `range` (resolved) for B rows x T tokens under memory (never auto), the
// tensor-parallel split, vocab_rows vocabulary rows of the head's block (VocabOps::rows) and an attention
// op of these sizes (the installed op, or a sizes-only one).
StageMemory block_stage_memory(const BlockSpec& spec, const ModelConfig& config, const StageRange& range,
                               int B, int T, const MemoryOptions& memory, const TpSplit& split,
                               int64_t vocab_rows, const AttentionSizing& attention);

class BlockStage : public LayerStage {
 public:
  const BlockSpec& block() const { return spec_; }
  const StageParams& names() const { return names_; }

  std::unique_ptr<StageActivations> make_activations() const override;
  void forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions, int B,
               int T) override;
  double loss(StageActivations& acts, float dloss, int64_t* count) override;
  void backward(StageActivations& acts) override;
  Logits logits(const StageActivations& acts) const override;
  std::unique_ptr<Decoder> make_decoder(int max_tokens) const override;
  using Stage::forward;
  using Stage::logits;
  size_t activation_bytes_for(int B, int T) const override;
  uint64_t offload_bytes_for(int B, int T) const override;

  // This rank's block sizes.
  BlockDims dims() const { return spec_.dims(config_, split()); }
  // RoPE's tables [n, D/2] at n positions (a block with RoPE).
  void rope_tables_at(float* cos, float* sin, const int* positions, int n) const;

 protected:
  // config is validated by the caller; table is the stage's table (stage_param_table), cut for the
  // tensor-parallel piece tp; names finds the stage's tensors in it.
  BlockStage(const BlockSpec& spec, const ModelConfig& config, const StageRange& range, ParamTable table,
             StageParams (*names)(const ParamTable& table, const StageRange& range,
                                  const ModelConfig& config),
             bool allocate_storage, bool tied_head, const TpPiece& tp);

 private:
  StageMemory memory_for(int B, int T) const {
    return block_stage_memory(spec_, config_, range_, B, T, memory_, split(),
                              vocab_->rows(config_.vocab_size), *attention_);
  }
  BlockShape shape(const BlockActivations& a) const {
    return {a.B, a.T, dims(), a.layer_chunk, a.query_chunks};
  }

  const BlockSpec& spec_;
  StageParams names_;            // views into table_
  std::vector<float> inv_freq_;  // [D/2] RoPE inverse frequencies (Llama-3 scaled when configured)
};

// Model FLOPs per token of a training step at sequence length T: 6 x (parameters in matmuls: qkv, proj,
// the MLP's up and down per layer and the LM head) + 6 n_layer H D T for causal attention (QK^T and PV
// over the causal half). Used for MFU.
double block_training_flops_per_token(const BlockSpec& spec, const ModelConfig& config, int T);

}  // namespace odyssey
