#include "odyssey/parallel/usp_attention.h"

namespace odyssey {

SequenceParallelAttention::SequenceParallelAttention(Communicator& ulysses, Communicator& ring,
                                                     SpAttentionOptions options)
    : ulysses_comm_(ulysses), ring_comm_(ring), options_(options) {
  // The ring runs whenever Ulysses does not cover the whole group (with one rank: local attention).
  if (ring.size() > 1 || ulysses.size() == 1)
    ring_ = std::make_unique<RingAttention>(
        ring, RingOptions{options.layout, options.overlap, options.progress_rows, options.bf16_wire},
        options.n_kv_head);
  if (ulysses.size() > 1) {
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

SequenceShard SequenceParallelAttention::shard() const {
  SequenceShard s{ulysses_comm_.size(), ring_comm_.size(), ulysses_comm_.rank(), ring_comm_.rank(),
                  options_.layout};
  s.chunk = chunks_queries() ? options_.chunk_tokens : 0;
  return s;
}

}  // namespace odyssey
