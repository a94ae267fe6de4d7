// The attention seam of a block: how causal self-attention over the fused qkv runs. Local by default;
// Ulysses, ring and their hybrid (parallel/) and the KV cache's cached attention replace it.
//
// What an op keeps between a layer's forward and its backward besides out and lse (Ulysses: the
// head-sharded q, k, v and out) is an opaque AttentionSaved the op puts into the layer's
// activations, which the caller owns: several micro-batches can be in flight, and a recomputed layer
// simply overwrites it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace odyssey {

// The keys and values of every token row of a layer (the K/V prefix of a query-chunked attention,
// long-context-memory.md §4.3): row i's Hkv D keys at k + i * row_stride, its values at v + i * row_stride.
struct KvRows {
  const float* k;
  const float* v;
  int64_t row_stride;
};
struct MutKvRows {
  float* k;
  float* v;
  int64_t row_stride;
};

// How a query-chunked layer holds its K/V prefix (and, in backward, dK and dV) for an op: rows of
// `stride` floats, K in the first half, V in the second, `per_row` prefix rows per token row of this
// rank (the local op: 1, rows in the layer's own order; Ulysses: U rows of the head-sharded sequence).
// in_qkv: a layer that keeps its whole fused qkv serves the prefix from it (no buffer beside it).
struct KvPrefixLayout {
  int64_t stride = 0;
  int per_row = 1;
  bool in_qkv = true;
  int64_t width() const { return stride * per_row; }  // floats per token row of this rank
  MutKvRows view(float* b) const { return {b, b + stride / 2, stride}; }
  bool operator==(const KvPrefixLayout&) const = default;
};

class AttentionSaved {
 public:
  virtual ~AttentionSaved() = default;
  virtual size_t bytes() const = 0;
};
using AttentionSavedPtr = std::unique_ptr<AttentionSaved>;

// What an attention op keeps and how a layer runs it, as functions of the sizes alone. The stage asks
// them of its installed op (AttentionOp derives from this); the footprint (train/footprint.h) asks a
// sizes-only object for a layout without building the op (LocalAttention needs nothing built; the
// sequence-parallel op's sizes: SpAttentionSizes, parallel/usp_attention.h).
class AttentionSizing {
 public:
  virtual ~AttentionSizing() = default;
  // True when backward reads not the layer's qkv but a copy the op saved itself (Ulysses keeps q, k, v
  // head-sharded): the layers then keep no qkv, one scratch qkv serves them all.
  virtual bool saves_qkv() const { return false; }
  // True when backward may be given the layer's own qkv buffer as dqkv (long-context-memory.md §4.8,
  // the ring and the hybrid): the layer then holds no sequence-wide dqkv beside its qkv. An op that
  // reads the qkv (the ring) copies what it still needs first (K and V into its travelling block, dq
  // accumulated in its scratch while q is read) and writes the gradient over the qkv; an op that
  // saves_qkv() never reads it, and the caller zeroes the buffer for it to accumulate into.
  virtual bool backward_in_place() const { return false; }
  // What scratch and saved tensors will hold after forward and backward of n_layer layers at this
  // shape (n_layer 0: the scratch alone; the rest is saved per layer, in the layers' activations).
  virtual size_t bytes_for(int /*B*/, int /*T*/, int /*H*/, int /*D*/, int /*n_layer*/) const { return 0; }
  // Whether the op runs query chunks against a K/V prefix (AttentionOp::forward_chunk).
  virtual bool chunks_queries() const { return false; }
  // The K/V prefix of a call with H query heads of dimension D.
  virtual KvPrefixLayout kv_prefix(int H, int D) const;
  // What forward_chunk and backward_chunk hold in scratch for chunks of `rows` rows (per-layer tensors
  // are the layer's, counted with its activations).
  virtual size_t chunk_bytes_for(int /*rows*/, int /*H*/, int /*D*/) const { return 0; }
};

// Causal self-attention over a fused qkv [B, T, (H + 2 Hkv) D] (q [B, T, H, D], k and v [B, T, Hkv, D];
// model/fused_qkv.h). GPT-2 has Hkv = H ([B, T, 3C]); an op serving a GQA model is built with its
// n_kv_head.
class AttentionOp : public AttentionSizing {
 public:
  // out [B, T, H D], lse [B, H, T] (kept by the caller for backward). saved: what the op keeps for
  // this layer's backward (null: nothing); an op may reuse what an earlier forward left there.
  virtual void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                       AttentionSavedPtr& saved) = 0;
  // Accumulates dqkv [B, T, (H + 2 Hkv) D] from dout [B, T, H D]. qkv is null when saves_qkv().
  virtual void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
                        int B, int T, int H, int D, const AttentionSaved* saved) = 0;
  // Scratch the op holds now (not what it saved into layers' activations).
  virtual size_t bytes() const { return 0; }

  // Query-chunked attention (long-context-memory.md §4.3, §4.8), for an op whose chunks_queries(): the
  // token rows [r, r + n) of the B T rows (the local op: a chunk may span sequences) attend causally to
  // the keys of their own sequence up to themselves, read from the K/V prefix kv (every row, in the
  // op's kv_prefix() layout). qkv: the chunk's fused rows [n, width] (forward reads its q columns);
  // out [n, H D]; lse: for each piece of the chunk within one sequence, H m floats at H times the
  // piece's first row in the chunk, in the op's layout (only its backward reads them; the local op:
  // [H, m], a whole sequence the [B, H, T] layout). The kernel is chunk-invariant: the local op's out
  // and lse are bitwise those of forward().
  // Writes the k and v of the chunk's fused rows qkv [n, width] into the prefix kv (when the layer
  // holds it beside a chunk's qkv; before the chunk's forward_chunk, and in the backward's pre-pass).
  virtual void store_kv(MutKvRows kv, const float* qkv, int r, int n, int T, int H, int D);
  virtual void forward_chunk(float* out, float* lse, const float* qkv, KvRows kv, int r, int n, int T, int H,
                             int D);
  // Accumulates dq into the q columns of the chunk's fused rows dqkv [n, width] and dk, dv into the
  // rows of the prefix it reads (dkv: every row, like kv), then adds the chunk's own dk and dv into
  // its k and v columns: chunks run last first, so they are complete. Over all chunks the local op's
  // dq is bitwise backward()'s; dk and dv sum in another order (rounding-level differences).
  virtual void backward_chunk(float* dqkv, MutKvRows dkv, const float* dout, const float* out,
                              const float* lse, const float* qkv, KvRows kv, int r, int n, int T, int H,
                              int D);
};

// Single-process causal attention: the shared blockwise kernel over the whole sequence, or over query
// chunks against the K/V prefix.
class LocalAttention : public AttentionOp {
 public:
  explicit LocalAttention(int n_kv_head = 0);  // 0: as many as query heads
  // train.precision = bf16: the kernel under the bf16 policy (kernels/attention.h), else the fp32 kernel.
  void set_bf16(bool on) { bf16_ = on; }
  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override;
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override;
  bool chunks_queries() const override { return true; }
  KvPrefixLayout kv_prefix(int H, int D) const override;
  void store_kv(MutKvRows kv, const float* qkv, int r, int n, int T, int H, int D) override;
  void forward_chunk(float* out, float* lse, const float* qkv, KvRows kv, int r, int n, int T, int H,
                     int D) override;
  void backward_chunk(float* dqkv, MutKvRows dkv, const float* dout, const float* out, const float* lse,
                      const float* qkv, KvRows kv, int r, int n, int T, int H, int D) override;

 private:
  int n_kv_head_;
  bool bf16_ = false;
};

}  // namespace odyssey
