// Sequence-parallel attention for a (sp_ulysses, sp_ring) layout, the op the trainer installs with
// GPT2::set_attention (spec §2.6, USP / LoongTrain's head x context 2-D):
//   U > 1, R = 1: Ulysses (ulysses.h);
//   U = 1, R > 1: ring attention (ring_attention.h), zigzag or contiguous;
//   U > 1, R > 1: the hybrid: the Ulysses all-to-all inside the ulysses group (contiguous ranks,
//                 intra-node first), then ring attention across the ring group over the
//                 head-sharded tensors (H/U heads, the ring rank's T/R tokens), then the
//                 all-to-all back;
//   U = R = 1:    the ring of one rank, i.e. local causal attention.
// Each rank's tokens must be the ones shard() describes (sequence_shard.h). Needs H % U == 0 and
// the KV rule of ulysses.h; no head constraint from the ring.
//
// Bytes per rank per layer: Ulysses' (ulysses.h, over U with Tl = T/(U R) tokens) plus the ring's
// (ring_attention.h, over R with c = T/R tokens of H/U heads): forward
//   (U-1)/U B Tl (2h + 2h_kv') 4  +  B (T/R) 2 (h_kv'/U) 4,
// backward the same Ulysses part plus (R-1 + R) B (T/R) 2 (h_kv'/U) 4.
#pragma once

#include <memory>

#include "odyssey/comm/communicator.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/parallel/ring_attention.h"
#include "odyssey/parallel/sequence_shard.h"
#include "odyssey/parallel/ulysses.h"

namespace odyssey {

struct SpAttentionOptions {
  RingLayout layout = RingLayout::zigzag;
  int n_kv_head = 0;  // 0: as many as query heads (GPT-2)
  bool overlap = true;
  int progress_rows = 256;
  // Ulysses without a ring: the tokens per chunk dealt to each rank (sequence_shard.h; 0: contiguous
  // pieces), which must be the layers' query chunks (memory.chunk_tokens; 0 under TP-SP, whose
  // attention runs whole). The op refuses query chunks of any other geometry.
  int chunk_tokens = 0;
  bool bf16_wire =
      false;  // train.precision = bf16: Ulysses and the ring move bf16 (ulysses.h, ring_attention.h)
};

// The sizes of the op a layout of U Ulysses and R ring ranks installs, without its communicators (the
// footprint, train/footprint.h): which op runs (Ulysses when U > 1, around an inner ring when R > 1;
// else the ring) and what it holds, from the ops' sizes-only functions (ulysses.h, ring_attention.h).
// SequenceParallelAttention answers its sizing questions through one of these.
class SpAttentionSizes : public AttentionSizing {
 public:
  SpAttentionSizes(int U, int R, const SpAttentionOptions& options) : U_(U), R_(R), options_(options) {}
  bool has_ring() const { return R_ > 1 || U_ == 1; }  // with one rank: the ring of one, local attention
  bool has_ulysses() const { return U_ > 1; }

  bool saves_qkv() const override { return has_ulysses(); }
  bool backward_in_place() const override { return has_ring(); }
  size_t bytes_for(int B, int T, int H, int D, int n_layer) const override;
  // Query chunks (long-context-memory.md §4.8): Ulysses alone runs them against the K/V prefix
  // (ulysses.h); under the ring and the hybrid the ring steps are the outer loop, each arriving K/V
  // block applied to every local query row block, and their backward runs in place (the layer's qkv
  // becomes its gradient: no sequence-wide dqkv).
  bool chunks_queries() const override { return has_ulysses() && !has_ring(); }
  KvPrefixLayout kv_prefix(int H, int D) const override;
  size_t chunk_bytes_for(int rows, int H, int D) const override;

 private:
  int U_, R_;
  SpAttentionOptions options_;
};

class SequenceParallelAttention : public AttentionOp {
 public:
  // ulysses, ring: the grid's sp_ulysses and sp_ring groups (not owned; must outlive the op).
  SequenceParallelAttention(Communicator& ulysses, Communicator& ring, SpAttentionOptions options = {});

  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override;
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override;

  size_t bytes() const override { return op_->bytes(); }
  // Sizing: the layout's SpAttentionSizes.
  bool saves_qkv() const override { return sizes_.saves_qkv(); }
  size_t bytes_for(int B, int T, int H, int D, int n_layer) const override {
    return sizes_.bytes_for(B, T, H, D, n_layer);
  }
  bool chunks_queries() const override { return sizes_.chunks_queries(); }
  bool backward_in_place() const override { return sizes_.backward_in_place(); }
  KvPrefixLayout kv_prefix(int H, int D) const override { return sizes_.kv_prefix(H, D); }
  void store_kv(MutKvRows kv, const float* qkv, int r, int n, int T, int H, int D) override {
    op_->store_kv(kv, qkv, r, n, T, H, D);
  }
  void forward_chunk(float* out, float* lse, const float* qkv, KvRows kv, int r, int n, int T, int H,
                     int D) override {
    op_->forward_chunk(out, lse, qkv, kv, r, n, T, H, D);
  }
  void backward_chunk(float* dqkv, MutKvRows dkv, const float* dout, const float* out, const float* lse,
                      const float* qkv, KvRows kv, int r, int n, int T, int H, int D) override {
    op_->backward_chunk(dqkv, dkv, dout, out, lse, qkv, kv, r, n, T, H, D);
  }
  size_t chunk_bytes_for(int rows, int H, int D) const override { return sizes_.chunk_bytes_for(rows, H, D); }

  // The token layout the op expects of its inputs: slice rows with shard_positions(T, shard()) (under
  // query-chunked Ulysses dealt by options.chunk_tokens).
  SequenceShard shard() const;
  RingAttention* ring() { return ring_.get(); }           // null without a ring
  UlyssesAttention* ulysses() { return ulysses_.get(); }  // null without Ulysses

 private:
  Communicator& ulysses_comm_;
  Communicator& ring_comm_;
  SpAttentionOptions options_;
  SpAttentionSizes sizes_;
  std::unique_ptr<RingAttention> ring_;
  std::unique_ptr<UlyssesAttention> ulysses_;
  AttentionOp* op_ = nullptr;
};

}  // namespace odyssey
