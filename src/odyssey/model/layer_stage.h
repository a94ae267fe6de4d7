// What every architecture's stage shares: the stage's range and parameter table, the flat buffers and
// where each unit's storage is now, the unit schedule, and the attention op, hooks, observer and
// memory options it runs with. An architecture's stage (gpt2.h, llama.h) derives from it and adds its
// embeddings, blocks, head and loss.
//
// Units of a stage, numbered from 0 over what it holds: the embeddings (with layer 0), one per layer,
// the final norm and LM head (with the last layer). The unit schedule of a micro-batch:
//   forward:  embeddings, each layer, final norm, [tied head: the embeddings' unit again]
//   backward: [tied head: embeddings' unit], final norm, each layer in reverse, [embeddings]
// A tied head's backward use of the embeddings' unit starts in loss() and lasts until after the
// embedding backward; a last stage without the embeddings keeps the tied head's matrix in its final
// unit, as does an untied head.
#pragma once

#include <optional>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/deferred_weight_grads.h"
#include "odyssey/model/lm_head.h"
#include "odyssey/model/query_chunks.h"
#include "odyssey/model/stage.h"

namespace odyssey {

class LayerStage : public Stage {
 public:
  const ModelConfig& config() const override { return config_; }
  const StageRange& range() const override { return range_; }
  const ParamTable& table() const override { return table_; }
  bool owns_storage() const override { return params_.size() > 0; }
  float* params() override { return params_.data(); }
  const float* params() const override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  int64_t num_params() const { return table_.total(); }
  // Zeroes the full gradient buffer (with allocated storage).
  void zero_grads() { grads_.zero(); }

  void set_unit_storage(int unit, float* params, float* grads) override;
  float* param(const ParamInfo& t) const override {
    return unit_params_[size_t(t.unit)] + (t.offset - table_.unit_begin(t.unit));
  }
  float* grad(const ParamInfo& t) const override {
    return unit_grads_[size_t(t.unit)] + (t.offset - table_.unit_begin(t.unit));
  }

  void set_attention(AttentionOp* op) override { attention_ = op ? op : &local_attention_; }
  void set_hooks(LayerHooks* hooks) override { hooks_ = hooks ? hooks : &no_hooks_; }
  void set_observer(OpObserver* observer) override { observer_ = observer; }
  void set_tensor_parallel(LinearOps* linears, VocabOps* vocab) override;
  int64_t residual_rows(int64_t n) const override { return split().rows(n); }
  void set_memory(const MemoryOptions& memory) override;
  void set_deferred_weight_grads(DeferredWeightGrads* later) override {
    if (later)
      deferring_.emplace(*linears_, *later);  // the stage's own linears (tensor-parallel or local)
    else
      deferring_.reset();
  }
  const std::vector<UnitUse>& unit_schedule() const override { return schedule_; }
  size_t attention_bytes() const override { return attention_->bytes(); }
  uint64_t offload_bytes_for(int B, int T) const override;

 protected:
  // config is validated and range resolved by the caller; table is the stage's (its units as above),
  // cut for the tensor-parallel piece tp. tied_head: the LM head is the embedding matrix.
  LayerStage(const ModelConfig& config, const StageRange& range, ParamTable table, bool allocate_storage,
             bool tied_head, const TpPiece& tp);
  LayerStage(const LayerStage&) = delete;
  LayerStage& operator=(const LayerStage&) = delete;

  bool has_head() const { return range_.head(config_); }
  // How the layers are split over the tensor-parallel group.
  TpSplit split() const { return linears_->split(); }
  // Whether the layers' attention runs per query chunk for B rows of T tokens, and how they hold the
  // K/V prefix (model/query_chunks.h).
  QueryChunks query_chunking(int B, int T) const {
    return query_chunks(*attention_, split(), split().rows(int64_t(B) * T), memory_.chunk_tokens, T,
                        config_.n_head / split().t, config_.head_dim());
  }
  // What the attention op holds beyond the layers' activations: its query-chunk scratch, or its
  // scratch and saved tensors for the whole sequence.
  size_t attention_bytes_for(int B, int T, const QueryChunks& qc) const {
    const int H = config_.n_head / split().t, D = config_.head_dim();
    if (qc.on)
      return attention_->chunk_bytes_for(
          qc.rows(int(split().rows(int64_t(B) * T)), memory_.chunk_tokens, T).chunk_rows(), H, D);
    return attention_->bytes_for(B, T, H, D, layers_saving_attention());
  }
  int layer_unit(int l) const { return (range_.embeddings() ? 1 : 0) + l - range_.layer_begin; }
  int final_unit() const { return table_.num_units() - 1; }
  int head_unit() const { return tied_head_ && range_.embeddings() ? 0 : final_unit(); }
  // Checks a micro-batch's tokens and positions and copies them, with the targets, into tokens,
  // positions, targets [B*T] (inputs are read only with the embeddings; targets null: none counted).
  void take_tokens(const int* inputs, const int* targets, const int* positions, int B, int T, int* tokens,
                   int* token_positions, int* token_targets) const;
  // The fused, chunked final norm, LM head and loss (lm_head.h) over the last layer's output x [rows(N),
  // C] with the head matrix `head`: the sum of the counted tokens' losses (all N of the tensor-parallel
  // group), their count in *count; with dloss > 0 also dx (x's buffer may be dx), the head's gradient
  // (its backward use beginning here, the hooks) and the final norm's weight gradients in norm.sums (the
  // caller adds them at the norm's backward use). head is null on a stage without the head (refused,
  // naming the stage).
  double head_loss(const float* x, const FinalNorm& norm, const ParamInfo* head, const int* targets,
                   float* losses, float* block, int chunk, float* dx, int N, float dloss, int64_t* count);

  // The blocks' linear seam in backward: the linears, or with deferred weight gradients those that
  // record their weight GEMMs.
  LinearOps& backward_linears() { return deferring_ ? static_cast<LinearOps&>(*deferring_) : *linears_; }

  // Layers whose attention keeps saved tensors at once (1 under full checkpointing; keep_attention keeps
  // every layer's).
  int layers_saving_attention() const {
    return memory_.checkpoint == CheckpointPolicy::full ? 1 : range_.layers();
  }

  ModelConfig config_;
  StageRange range_;
  ParamTable table_;
  bool tied_head_;
  FloatBuffer params_, grads_;
  std::vector<float*> unit_params_, unit_grads_;  // per unit: the storage of its range
  std::vector<UnitUse> schedule_;
  TpPiece tp_;
  LinearOps* linears_ = &local_linears();
  VocabOps* vocab_ = &local_vocab();
  LocalAttention local_attention_;
  AttentionOp* attention_ = &local_attention_;
  LayerHooks no_hooks_;
  LayerHooks* hooks_ = &no_hooks_;
  OpObserver* observer_ = nullptr;
  MemoryOptions memory_;
  std::optional<DeferringLinears> deferring_;  // while weight gradients are deferred
};

}  // namespace odyssey
