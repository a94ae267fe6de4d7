// GPT-2 forward and backward, exactly as Hugging Face's GPT2LMHeadModel: learned positions,
// pre-LayerNorm (eps 1e-5), tanh GELU, tied input/output embeddings, biases everywhere.
//
// The model owns no communication. Two seams let the parallel layer change how it runs:
//   - AttentionOp: how causal self-attention over the fused qkv runs (local by default; Ulysses or
//     ring attention replace it);
//   - LayerHooks: called around each layer's forward and backward (ZeRO-3 gathers parameters before
//     a layer, data parallelism starts a gradient reduction after a layer's backward).
#pragma once

#include <cstdint>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/config.h"
#include "odyssey/model/params.h"

namespace odyssey {

// Causal self-attention over a fused qkv [B, T, 3C] (q, k, v each [B, T, H, D]).
class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // out [B, T, C], lse [B, H, T] (saved for backward).
  virtual void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D) = 0;
  // Accumulates dqkv [B, T, 3C] from dout [B, T, C].
  virtual void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                        int B, int T, int H, int D) = 0;
  // Memory the op holds now (activations it saves for backward, scratch), and what it will hold after
  // forward and backward of n_layer layers at this shape (the memory check, before allocating).
  virtual size_t bytes() const { return 0; }
  // True when backward reads not the model's qkv but a copy the op saved itself (Ulysses keeps q, k, v
  // head-sharded): the model then keeps one qkv buffer for all layers instead of one per layer.
  // Such an op must tell layers apart by their lse pointer, which stays per layer.
  virtual bool saves_qkv() const { return false; }
  virtual size_t bytes_for(int /*B*/, int /*T*/, int /*H*/, int /*D*/, int /*n_layer*/) const { return 0; }
};

// Single-process causal attention: the shared blockwise kernel over the whole sequence.
class LocalAttention : public AttentionOp {
 public:
  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D) override;
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D) override;
};

// Called around the use of each parameter unit (ParamTable: unit 0 embeddings + LM head, 1 + l layer l,
// L + 1 final norm), in this order for one micro-batch:
//   forward:  before_forward(0) after_forward(0)            embeddings
//             before_forward(1+l) after_forward(1+l)        each layer, l = 0 .. L-1
//             before_forward(L+1) after_forward(L+1)        final norm
//             before_forward(0) after_forward(0)            LM head (tied to wte)
//   backward: before_backward(0)                            LM head, accumulates d wte
//             before_backward(L+1) after_backward(L+1)      final norm
//             before_backward(1+l) after_backward(1+l)      each layer, l = L-1 .. 0
//             embeddings backward                           (unit 0 still acquired)
//             after_backward(0)
// before_* may repoint the unit's storage (GPT2::set_unit_storage), e.g. at gathered parameters;
// after_backward(u) means unit u's gradients for this micro-batch are complete.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_forward(int /*unit*/) {}
  virtual void after_forward(int /*unit*/) {}
  virtual void before_backward(int /*unit*/) {}
  virtual void after_backward(int /*unit*/) {}
};

// Activations of one micro-batch of B rows x T tokens (N = B*T), kept for backward.
struct Activations {
  int B = 0, T = 0;
  FloatBuffer encoded;                               // [N, C]
  std::vector<FloatBuffer> ln1, ln1_mean, ln1_rstd;  // per layer: [N, C], [N], [N]
  std::vector<FloatBuffer> qkv, atty,
      att_lse;                         // [N, 3C] (one shared by all layers: shared_qkv), [N, C], [B, H, T]
  std::vector<FloatBuffer> residual2;  // [N, C]  x + attn(x)
  std::vector<FloatBuffer> ln2, ln2_mean, ln2_rstd;
  std::vector<FloatBuffer> fch, fch_gelu;  // [N, 4C]
  std::vector<FloatBuffer> residual3;      // [N, C]  block output
  FloatBuffer lnf, lnf_mean, lnf_rstd;     // [N, C], [N], [N]
  FloatBuffer logits;                      // [N, V]; holds dlogits after forward_backward
  FloatBuffer losses;                      // [N]
  IntBuffer tokens, targets, positions;    // [N]
  // Backward scratch, reused by every layer.
  FloatBuffer dres, dln, datty, dqkv, dfch, dfch_gelu;

  bool shared_qkv = false;
  float* qkv_of(int layer) { return qkv[shared_qkv ? 0 : size_t(layer)].data(); }

  void allocate(const ModelConfig& config, int B, int T, bool shared_qkv = false);
  size_t bytes() const;
  // What allocate(config, B, T, shared_qkv) would hold, without allocating (the memory check).
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool shared_qkv = false);
};

class GPT2 {
 public:
  // allocate_storage=false: no full parameter/gradient buffers; every unit must be given storage
  // with set_unit_storage before use (ZeRO-3 keeps only shards and gathers a unit at a time).
  explicit GPT2(const ModelConfig& config, bool allocate_storage = true);

  const ModelConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  // The full flat buffers (null without allocated storage).
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  int64_t num_params() const { return table_.total(); }

  // Points unit u at other storage: params/grads hold the unit's range [unit_begin, unit_end).
  void set_unit_storage(int unit, float* params, float* grads);
  // Where tensor t's parameters / gradients are now.
  float* param(const ParamInfo& t) const {
    return unit_params_[size_t(t.unit)] + (t.offset - table_.unit_begin(t.unit));
  }
  float* grad(const ParamInfo& t) const {
    return unit_grads_[size_t(t.unit)] + (t.offset - table_.unit_begin(t.unit));
  }

  void set_attention(AttentionOp* op) { attention_ = op ? op : &local_attention_; }
  void set_hooks(LayerHooks* hooks) { hooks_ = hooks ? hooks : &no_hooks_; }

  // inputs, targets: [B, T] token ids (target < 0: not counted); positions: [T] global positions of
  // the T tokens (null: 0..T-1). Returns the sum of the token losses and sets *count to the tokens
  // counted.
  double forward(const int* inputs, const int* targets, const int* positions, int B, int T, int64_t* count);
  // Forward, then backward with each token's loss weighted by dloss (1 / tokens in the optimizer step);
  // gradients accumulate into grads(). Returns the sum of token losses as forward does.
  double forward_backward(const int* inputs, const int* targets, const int* positions, int B, int T,
                          float dloss, int64_t* count);
  // Logits [B*T, V] of the last forward (valid after forward(), before any backward).
  const float* logits() const { return acts_.logits.data(); }

  // Zeroes the full gradient buffer (with allocated storage).
  void zero_grads() { grads_.zero(); }
  const Activations& activations() const { return acts_; }
  // The activations and what the attention op holds besides (sequence parallelism's saved tensors).
  size_t activation_bytes() const { return acts_.bytes() + attention_->bytes(); }
  // What activation_bytes() will be after a micro-batch of B rows of T tokens, without allocating.
  size_t activation_bytes_for(int B, int T) const {
    return Activations::bytes_for(config_, B, T, attention_->saves_qkv()) +
           attention_->bytes_for(B, T, config_.n_head, config_.d_model / config_.n_head, config_.n_layer);
  }

 private:
  void run_forward(const int* inputs, const int* targets, const int* positions, int B, int T);
  void run_backward();

  ModelConfig config_;
  ParamTable table_;
  FloatBuffer params_, grads_;
  std::vector<float*> unit_params_, unit_grads_;  // per unit: the storage of its range
  Activations acts_;
  LocalAttention local_attention_;
  AttentionOp* attention_ = &local_attention_;
  LayerHooks no_hooks_;
  LayerHooks* hooks_ = &no_hooks_;
};

// Model FLOPs per token for a training step (forward + backward) at sequence length T:
// 6 * (parameters in matmuls) + 6 * n_layer * d_model * T for causal attention (QK^T and PV, the
// masked half not counted). Used for MFU.
double training_flops_per_token(const ModelConfig& config, int T);

}  // namespace odyssey
