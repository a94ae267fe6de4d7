// The attention seam of a block: how causal self-attention over the fused qkv runs. Local by default;
// Ulysses, ring and their hybrid (parallel/) and the KV cache's cached attention replace it.
//
// What an op keeps between a layer's forward and its backward besides out and lse (Ulysses: the
// head-sharded q, k, v and out) is an opaque AttentionSaved the op puts into the layer's
// activations, which the caller owns: several micro-batches can be in flight, and a recomputed layer
// simply overwrites it.
#pragma once

#include <cstddef>
#include <memory>

namespace odyssey {

class AttentionSaved {
 public:
  virtual ~AttentionSaved() = default;
  virtual size_t bytes() const = 0;
};
using AttentionSavedPtr = std::unique_ptr<AttentionSaved>;

// Causal self-attention over a fused qkv [B, T, (H + 2 Hkv) D] (q [B, T, H, D], k and v [B, T, Hkv, D];
// model/fused_qkv.h). GPT-2 has Hkv = H ([B, T, 3C]); an op serving a GQA model is built with its
// n_kv_head.
class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // out [B, T, H D], lse [B, H, T] (kept by the caller for backward). saved: what the op keeps for
  // this layer's backward (null: nothing); an op may reuse what an earlier forward left there.
  virtual void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                       AttentionSavedPtr& saved) = 0;
  // Accumulates dqkv [B, T, (H + 2 Hkv) D] from dout [B, T, H D]. qkv is null when saves_qkv().
  virtual void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                        int B, int T, int H, int D, const AttentionSaved* saved) = 0;
  // Scratch the op holds now (not what it saved into layers' activations).
  virtual size_t bytes() const { return 0; }
  // True when backward reads not the layer's qkv but a copy the op saved itself (Ulysses keeps q, k, v
  // head-sharded): the layers then keep no qkv, one scratch qkv serves them all.
  virtual bool saves_qkv() const { return false; }
  // What scratch and saved tensors will hold after forward and backward of n_layer layers at this
  // shape (the memory check, before allocating).
  virtual size_t bytes_for(int /*B*/, int /*T*/, int /*H*/, int /*D*/, int /*n_layer*/) const { return 0; }
};

// Single-process causal attention: the shared blockwise kernel over the whole sequence.
class LocalAttention : public AttentionOp {
 public:
  explicit LocalAttention(int n_kv_head = 0);  // 0: as many as query heads
  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override;
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override;

 private:
  int n_kv_head_;
};

}  // namespace odyssey
