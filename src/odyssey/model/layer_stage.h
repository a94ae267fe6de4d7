// What every architecture's stage shares: the stage's range and parameter table, the flat buffers and
// where each unit's storage is now, the unit schedule, and the attention op, hooks, observer and
// memory options it runs with, and the steps of forward, loss and backward around the layers (the
// embeddings, the final norm, the fused LM head and loss). The block stage (block_stage.h) derives from
// it and adds the layers and what else a block needs (RoPE's tables).
//
// Units of a stage, numbered from 0 over what it holds: the embeddings (with layer 0), one per layer,
// the final norm and LM head (with the last layer). The unit schedule of a micro-batch:
//   forward:  embeddings, each layer, final norm, [tied head: the embeddings' unit again]
//   backward: [tied head: embeddings' unit], final norm, each layer in reverse, [embeddings]
// A tied head's backward use of the embeddings' unit starts in loss() and lasts until after the
// embedding backward; a last stage without the embeddings keeps the tied head's matrix in its final
// unit, as does an untied head.
#pragma once

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/core/error.h"
#include "odyssey/model/deferred_weight_grads.h"
#include "odyssey/model/layer_loop.h"
#include "odyssey/model/lm_head.h"
#include "odyssey/model/query_chunks.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// The unit schedule above of a stage holding `range` (resolved); tied_head: the LM head is the embedding
// matrix. A pure function of the sizes (ZeRO-3's gathers follow it; the footprint simulates them).
std::vector<UnitUse> stage_unit_schedule(const ModelConfig& config, const StageRange& range, bool tied_head);

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
  // param / grad as functions of a tensor name, for the blocks' resolve_*layer.
  auto param_at() const {
    return [this](const ParamInfo& t) { return param(t); };
  }
  auto grad_at() const {
    return [this](const ParamInfo& t) { return grad(t); };
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
  // Whether one scratch qkv serves every layer (the op saves its own copy for backward and the layers'
  // attention is not cut into query chunks): the activations' allocate and bytes_for take it as
  // shared_qkv.
  bool shared_qkv(const QueryChunks& qc) const { return attention_->saves_qkv() && !qc.on; }
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

  // The steps of forward(), loss() and backward() around the layers, the same for every architecture;
  // A is its activations (BlockActivations). Their tensors are the stage's names (null where the
  // stage does not hold them; used only where it does). An architecture's forward is start_forward,
  // forward_embeddings, its layers (forward_layers, layer_loop.h), forward_final_units; its loss is
  // stage_loss; its backward is backward_final_units, its layers (backward_layers from layers_input),
  // backward_embeddings.
  //
  // Checks a micro-batch of B x T tokens, sizes acts for it (A::allocate) and takes its tokens.
  template <typename A>
  A& start_forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions, int B,
                   int T);
  // The embeddings' forward use (unit 0): the rows of tokens_w for the tokens (plus those of
  // positions_w for their positions, with learned positions) as the layers' input, which it returns; a
  // stage without the embeddings returns acts.input.
  template <typename A>
  const float* forward_embeddings(A& a, const ParamInfo* tokens_w, const ParamInfo* positions_w);
  // After the layers, with the head: the final norm's forward use, which copies its weight (and bias,
  // when it has one) for loss(), and a tied head's use of the embeddings' unit.
  template <typename A>
  void forward_final_units(A& a, const ParamInfo* norm_w, const ParamInfo* norm_b);
  // loss(): the fused chunked final norm, LM head and loss (head_loss) over the last layer's output;
  // norm: the final norm over a.final_norm (weight; bias or eps), its gradient sums set here.
  template <typename A>
  double stage_loss(A& a, FinalNorm norm, const ParamInfo* head, float dloss, int64_t* count);
  // The start of backward(): with the head, the final norm's backward use (adds the gradients loss()
  // left in a.final_norm_sums); without it, d(the stage's output) from acts.output_grad into a.dres.
  template <typename A>
  void backward_final_units(A& a, const ParamInfo* norm_w, const ParamInfo* norm_b);
  // The first layer's input as the backward reads it: the embeddings' output, or the stage's input.
  template <typename A>
  const float* layers_input(const A& a) const {
    return range_.embeddings() ? a.encoded.data() : a.input;
  }
  // The end of backward(), with the embeddings: their backward use, from d(input) in a.dres.
  template <typename A>
  void backward_embeddings(A& a, const ParamInfo* tokens_w, const ParamInfo* positions_w);

  // The blocks' linear seam in backward: the linears, or with deferred weight gradients those that
  // record their weight GEMMs.
  LinearOps& backward_linears() { return deferring_ ? static_cast<LinearOps&>(*deferring_) : *linears_; }

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

template <typename A>
A& LayerStage::start_forward(StageActivations& acts, const int* inputs, const int* targets,
                             const int* positions, int B, int T) {
  const ModelConfig& c = config_;
  ODY_CHECK(B > 0 && T > 0, "forward: empty batch (B={}, T={})", B, T);
  ODY_CHECK(T <= c.seq_len, "sequence length {} exceeds the model's context model.seq_len={}", T, c.seq_len);
  ODY_CHECK(int64_t(B) * T <= std::numeric_limits<int>::max(), "forward: {} x {} tokens overflow", B, T);
  A& a = static_cast<A&>(acts);
  ODY_CHECK(range_.embeddings() || a.input,
            "forward: the stage of layers [{}, {}) needs its input hidden states (acts.input)",
            range_.layer_begin, range_.layer_end);
  const QueryChunks qc = query_chunking(B, T);
  a.allocate(c, range_, B, T, shared_qkv(qc), memory_, split(), vocab_->rows(c.vocab_size), qc);
  a.head_backward_done = false;
  take_tokens(inputs, targets, positions, B, T, a.tokens.data(), a.positions.data(), a.targets.data());
  return a;
}

template <typename A>
const float* LayerStage::forward_embeddings(A& a, const ParamInfo* tokens_w, const ParamInfo* positions_w) {
  if (!range_.embeddings()) return a.input;
  hooks_->before_forward(0);
  float* e = a.kept.embeddings_output(a.encoded);
  vocab_->embedding_forward(e, a.tokens.data(), a.positions.data(), param(*tokens_w),
                            positions_w ? param(*positions_w) : nullptr, a.B * a.T, config_.d_model,
                            memory_.chunk_tokens, observer_);
  a.kept.keep_embeddings_output();
  hooks_->after_forward(0);
  return e;
}

template <typename A>
void LayerStage::forward_final_units(A& a, const ParamInfo* norm_w, const ParamInfo* norm_b) {
  if (!has_head()) return;
  const int C = config_.d_model;
  // The final norm's forward use: its parameters for loss(), which runs it chunk by chunk with the head
  // (no [N, C] norm output).
  hooks_->before_forward(final_unit());
  std::copy(param(*norm_w), param(*norm_w) + C, a.final_norm.data());
  if (norm_b) std::copy(param(*norm_b), param(*norm_b) + C, a.final_norm.data() + C);
  hooks_->after_forward(final_unit());
  // A tied LM head's forward use: its logits are computed chunk by chunk in loss(), with the loss.
  if (head_unit() != final_unit()) {
    hooks_->before_forward(head_unit());
    hooks_->after_forward(head_unit());
  }
}

template <typename A>
double LayerStage::stage_loss(A& a, FinalNorm norm, const ParamInfo* head, float dloss, int64_t* count) {
  // Recomputing policies keep the head's input in dres, which a loss with a gradient overwrites.
  ODY_CHECK(!(a.head_backward_done && a.kept.recomputes_layers()),
            "loss: a loss with a gradient already ran since the forward (memory.checkpoint = {} keeps the "
            "last layer's output where its gradient now is); run forward again",
            enum_name(kCheckpointPolicyNames, a.kept.policy));
  norm.sums = &a.final_norm_sums;
  float* block = place_lm_head(a.head_buffers(), norm, a.head_chunk, split(),
                               vocab_->rows(config_.vocab_size), config_.d_model);
  const double sum = head_loss(a.output(), norm, head, a.targets.data(), a.losses.data(), block, a.head_chunk,
                               a.dres.data(), a.B * a.T, dloss, count);
  a.head_backward_done = dloss > 0;
  return sum;
}

template <typename A>
void LayerStage::backward_final_units(A& a, const ParamInfo* norm_w, const ParamInfo* norm_b) {
  if (has_head()) {
    ODY_CHECK(a.head_backward_done, "backward: no loss with a gradient weight (dloss > 0) since the forward");
    a.head_backward_done = false;
    // loss() left d(last layer output) in dres and the final norm's parameter gradients in its sums.
    if (final_unit() != head_unit()) hooks_->before_backward(final_unit());
    a.final_norm_sums.finish(grad(*norm_w), norm_b ? grad(*norm_b) : nullptr);
    hooks_->after_backward(final_unit());
  } else {
    ODY_CHECK(a.output_grad, "backward: the stage of layers [{}, {}) needs d(its output) (acts.output_grad)",
              range_.layer_begin, range_.layer_end);
    std::copy(a.output_grad, a.output_grad + split().rows(int64_t(a.B) * a.T) * config_.d_model,
              a.dres.data());
  }
}

template <typename A>
void LayerStage::backward_embeddings(A& a, const ParamInfo* tokens_w, const ParamInfo* positions_w) {
  if (!range_.embeddings()) return;                                   // a.dres holds d(input)
  if (!(has_head() && head_unit() == 0)) hooks_->before_backward(0);  // else begun by the tied head
  vocab_->embedding_backward(grad(*tokens_w), positions_w ? grad(*positions_w) : nullptr, a.dres.data(),
                             a.tokens.data(), a.positions.data(), a.B * a.T, config_.d_model,
                             memory_.chunk_tokens, observer_);
  hooks_->after_backward(0);
}

}  // namespace odyssey
