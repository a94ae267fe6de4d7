// DeepSpeed-Ulysses (spec §2.2): attention over the whole sequence for a slice of the heads. The
// Ulysses group's U ranks each hold Tl = T / U tokens of every row (sequence_shard.h); one
// all-to-all turns the fused qkv from sequence-sharded into head-sharded, attention runs on
// the full sequence for the rank's heads, one all-to-all turns the output back.
//
//   qkv  [B, Tl, (H + 2 Hkv) D]  --a2a-->  [B, U Tl, (H/U + 2 Hkv_l) D]   (Q, K, V in one call)
//   out  [B, U Tl, H/U, D]       --a2a-->  [B, Tl, H D]
//   backward: dout a2a in, local backward, dq|dk|dv a2a back (replicated KV grads summed).
//
// Heads: H % U == 0; rank j gets query heads [j H/U, (j+1) H/U). Key/value heads (GQA, Hkv <= H):
//   Hkv % U == 0: rank j gets kv heads [j Hkv/U, (j+1) Hkv/U) (Hkv_l = Hkv / U);
//   U % Hkv == 0: kv head j / (U / Hkv), i.e. each kv head replicated to the U / Hkv ranks whose
//                 query heads read it (Hkv_l = 1), and their gradients summed on the way back;
//   otherwise an error naming the sizes.
//
// With an inner RingAttention (the hybrid, usp_attention.h) the head-sharded tensors hold the ring
// rank's U Tl tokens and attention runs around the ring; without one it is the kernel, causal over
// the whole row.
//
// State kept between forward and backward, per layer, in the AttentionSaved the op returns into the
// layer's activations (the caller owns it): the head-sharded qkv and out, 4 B Tl C floats for MHA, so
// backward needs only the dout and dqkv all-to-alls (and not the layer's qkv: saves_qkv()). The lse
// the model stores is this rank's HEAD-sharded [B, H/U, U Tl] (same element count as [B, H, Tl]);
// only this op's backward reads it.
//
// Query chunks (long-context-memory.md §4.8, without an inner ring): the ranks' tokens are dealt by
// chunk (sequence_shard.h), so local chunk j of every rank, m rows each, makes the contiguous global
// segment [U t0, U (t0 + m)) of the row, rank q's m rows at U t0 + q m. Per chunk: store_kv sends the
// chunk's k and v to their heads' ranks, which write the segment into the layer's head-sharded K/V
// prefix [B, U Tl, 2 Hkv_l D] (KvPrefixLayout: U prefix rows per local row); forward_chunk sends q,
// runs the kernel for the segment's queries against the prefix (causal from U t0) and sends out back;
// backward_chunk sends q, out and dout, runs the kernel's backward into the segment's dq and the
// prefix's dK, dV, and sends dq and the segment's now complete dK, dV back (replicated KV heads
// summed in rank order). The lse of a chunk is head-sharded, [H/U, U m] in its H m floats. Nothing
// is saved per layer beyond the prefix; scratch holds one chunk's messages.
//
// Bytes per rank per layer (all-to-all bus bytes, (U-1)/U of each full buffer; h = H D,
// h_kv' = U Hkv_l D — h_kv, or U D with replication):
//   forward  (U-1)/U * B Tl * (2 h + 2 h_kv') * 4      (qkv in, out back)
//   backward (U-1)/U * B Tl * (2 h + 2 h_kv') * 4      (dout in, dqkv back)
// = (U-1)/U * 4 N h / U per row of N tokens for MHA: constant when N and U grow together.
#pragma once

#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/parallel/ring_attention.h"

namespace odyssey {

// The head split of H query and Hkv key/value heads over U ranks (checked on construction).
struct UlyssesHeads {
  int H, Hkv, U;
  int local_heads() const { return H / U; }
  int local_kv_heads() const { return Hkv >= U ? Hkv / U : 1; }
  int first_head(int rank) const { return rank * local_heads(); }
  int first_kv_head(int rank) const { return Hkv >= U ? rank * local_kv_heads() : rank / (U / Hkv); }

  UlyssesHeads(int H, int Hkv, int U);
};

// Sizes only (the footprint, train/footprint.h; the op's own methods): what Ulysses over U ranks with
// n_kv_head key/value heads (0: H) holds after forward and backward of n_layer layers (saved per layer:
// the head-sharded qkv and out; scratch: its messages, and an inner ring's of ring_ranks ranks, 0:
// none), for query chunks of `rows` rows, and its K/V prefix. bf16_wire: with the bf16 copies of its
// largest message sent and received (and the inner ring's bf16 blocks).
size_t ulysses_bytes_for(int U, int n_kv_head, int ring_ranks, int progress_rows, int B, int T, int H, int D,
                         int n_layer, bool bf16_wire);
size_t ulysses_chunk_bytes_for(int U, int n_kv_head, int rows, int H, int D, bool bf16_wire);
KvPrefixLayout ulysses_kv_prefix(int U, int n_kv_head, int H, int D);

class UlyssesAttention : public AttentionOp {
 public:
  // n_kv_head: key/value heads of the fused qkv (0: as many as query heads). inner (not owned):
  // ring attention over the head-sharded tensors (the hybrid), or null. deal_chunk: the tokens per
  // chunk the ranks' tokens are dealt by (sequence_shard.h; 0: contiguous): query chunks must be its
  // chunks (checked: other chunks would attend the wrong tokens).
  // bf16_wire (train.precision = bf16): every all-to-all moves bf16 (q, k, v, the output and their
  // gradients, which the policy stores in bf16: lossless for the rounded q, k, v and d(output); the
  // output and d(qkv) are rounded on the wire rather than after it, the same values): half the bytes.
  // The kernel is then the bf16 policy's (attention_forward_bf16).
  UlyssesAttention(Communicator& ulysses, int n_kv_head = 0, RingAttention* inner = nullptr,
                   int deal_chunk = 0, bool bf16_wire = false);

  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override;
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override;

  size_t bytes() const override;
  bool saves_qkv() const override { return true; }
  bool backward_in_place() const override { return true; }  // reads the saved copies, not the qkv
  size_t bytes_for(int B, int T, int H, int D, int n_layer) const override;

  bool chunks_queries() const override { return inner_ == nullptr; }
  KvPrefixLayout kv_prefix(int H, int D) const override;
  void store_kv(MutKvRows kv, const float* qkv, int r, int n, int T, int H, int D) override;
  void forward_chunk(float* out, float* lse, const float* qkv, KvRows kv, int r, int n, int T, int H,
                     int D) override;
  void backward_chunk(float* dqkv, MutKvRows dkv, const float* dout, const float* out, const float* lse,
                      const float* qkv, KvRows kv, int r, int n, int T, int H, int D) override;
  size_t chunk_bytes_for(int rows, int H, int D) const override;

 private:
  struct Saved : AttentionSaved {
    int B = 0, T = 0, H = 0, D = 0;
    FloatBuffer qkv, out;  // [B, U T, (H/U + 2 Hkv_l) D], [B, U T, H/U D]
    size_t bytes() const override { return qkv.bytes() + out.bytes(); }
  };

  // Fails unless rows [r, r + n) of sequences of T are one of the chunks the tokens were dealt by.
  void check_dealt(int r, int n, int T) const;

  // The all-to-all of count floats per rank (in bf16 under bf16_wire, through wire_send_, wire_recv_).
  void exchange(const float* send, float* recv, size_t count);

  Communicator& comm_;
  int n_kv_head_;
  RingAttention* inner_;
  int deal_chunk_;
  bool bf16_wire_;
  FloatBuffer send_, recv_, dout_h_, dqkv_h_;  // scratch
  std::vector<bf16> wire_send_, wire_recv_;    // bf16_wire: the messages as bf16, kept at their largest
};

}  // namespace odyssey
