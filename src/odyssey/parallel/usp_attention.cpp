#include "odyssey/parallel/usp_attention.h"

namespace odyssey {

SequenceParallelAttention::SequenceParallelAttention(Communicator& ulysses, Communicator& ring,
                                                     SpAttentionOptions options)
    : ulysses_comm_(ulysses),
      ring_comm_(ring),
      options_(options),
      sizes_(ulysses.size(), ring.size(), options) {
  // The ring runs whenever Ulysses does not cover the whole group (with one rank: local attention).
  if (sizes_.has_ring())
    ring_ = std::make_unique<RingAttention>(
        ring, RingOptions{options.layout, options.overlap, options.progress_rows, options.bf16_wire},
        options.n_kv_head);
  if (sizes_.has_ulysses()) {
    // Inside the hybrid the ring sees the head-sharded kv heads; it reads their count from its dims.
    ulysses_ = std::make_unique<UlyssesAttention>(ulysses, options.n_kv_head, ring_.get(),
                                                  ring_ ? 0 : options.chunk_tokens, options.bf16_wire);
    op_ = ulysses_.get();
  } else {
    op_ = ring_.get();
  }
}

void SequenceParallelAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                                        AttentionSavedPtr& saved) {
  op_->forward(out, lse, qkv, B, T, H, D, saved);
}

void SequenceParallelAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                                         const float* qkv, int B, int T, int H, int D,
                                         const AttentionSaved* saved) {
  op_->backward(dqkv, dout, out, lse, qkv, B, T, H, D, saved);
}

size_t SpAttentionSizes::bytes_for(int B, int T, int H, int D, int n_layer) const {
  if (has_ulysses())
    return ulysses_bytes_for(U_, options_.n_kv_head, R_ > 1 ? R_ : 0, options_.progress_rows, B, T, H, D,
                             n_layer, options_.bf16_wire);
  return ring_bytes_for(R_, options_.progress_rows, options_.n_kv_head, B, T, H, D, options_.bf16_wire);
}

KvPrefixLayout SpAttentionSizes::kv_prefix(int H, int D) const {
  return has_ulysses() ? ulysses_kv_prefix(U_, options_.n_kv_head, H, D) : AttentionSizing::kv_prefix(H, D);
}

size_t SpAttentionSizes::chunk_bytes_for(int rows, int H, int D) const {
  return chunks_queries() ? ulysses_chunk_bytes_for(U_, options_.n_kv_head, rows, H, D, options_.bf16_wire)
                          : 0;
}

SequenceShard SequenceParallelAttention::shard() const {
  SequenceShard s{ulysses_comm_.size(), ring_comm_.size(), ulysses_comm_.rank(), ring_comm_.rank(),
                  options_.layout};
  s.chunk = chunks_queries() ? options_.chunk_tokens : 0;
  return s;
}

}  // namespace odyssey
