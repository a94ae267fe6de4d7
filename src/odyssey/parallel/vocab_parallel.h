// The vocabulary split over a tensor-parallel group (tensor-pipeline-parallelism.md §1.5, §1.6): the
// embedding table and the LM head hold row shards of the padded vocabulary, and the cross-entropy
// is computed from logit column shards without ever gathering [n, V].
//
// The vocabulary V is padded to Vp = t * ceil(V / t); rank r owns rows [r Vp/t, (r+1) Vp/t). Rows
// >= V are padding: never looked up, never a target, their logits treated as -inf (so the loss is
// exactly Hugging Face's over V classes).
#pragma once

#include <cstdint>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/vocab_ops.h"

namespace odyssey {

// This rank's slice of the vocabulary.
struct VocabShard {
  int64_t V = 0;     // real vocabulary
  int64_t Vp = 0;    // padded: a multiple of t
  int64_t lo = 0;    // first global row of this rank
  int64_t rows = 0;  // Vp / t rows held (including padding)
  int64_t real = 0;  // rows < V among them (0 when the whole shard is padding)
  bool owns(int64_t id) const { return id >= lo && id < lo + real; }
};

int64_t padded_vocab(int64_t V, int t);
VocabShard vocab_shard(const Communicator& tp, int64_t V);

// Embedding over a vocabulary shard E_r [rows, C]. Tokens outside the shard contribute zero; the
// group's sum is the full embedding.
//   slice_tokens = false: e [n, C], every rank the whole (all-reduce; Megatron's reduce_from).
//   slice_tokens = true:  e [n/t, C], this rank's token slice (reduce-scatter; TP-SP).
// scratch: n C floats under slice_tokens.
void vocab_embedding_forward(Communicator& tp, float* e, const int* ids, const float* E_r,
                             const VocabShard& s, int64_t n, int C, bool slice_tokens, FloatBuffer& scratch);
// dE_r += the rows of de of tokens this rank owns. de in e's layout: under slice_tokens it is the
// token slice [n/t, C] and is gathered first (the reduce-scatter's adjoint); otherwise [n, C].
void vocab_embedding_backward(Communicator& tp, float* dE_r, const float* de, const int* ids,
                              const VocabShard& s, int64_t n, int C, bool slice_tokens, FloatBuffer& scratch);

// Cross-entropy of logit column shards logits_r [n, rows] (rows ld floats apart; 0: rows) against
// targets [n] (global ids; < 0 is ignored: loss 0, gradient 0). One MAX all-reduce of n floats, then
// one SUM of 2n (normaliser and target logit packed). losses [n] are identical on every rank.
void vp_cross_entropy_forward(Communicator& tp, float* losses, const float* logits_r, const int* targets,
                              const VocabShard& s, int64_t n, FloatBuffer& scratch, int64_t ld = 0);
// Forward, and logits_r overwritten with dloss * (softmax - onehot) over this rank's columns
// (padding columns 0). dloss as cross_entropy_forward_backward's.
void vp_cross_entropy_forward_backward(Communicator& tp, float* logits_to_dlogits_r, float* losses,
                                       const int* targets, const VocabShard& s, int64_t n, float dloss,
                                       FloatBuffer& scratch, int64_t ld = 0);

// The stage's vocabulary seam (model/vocab_ops.h) over a tensor-parallel group: the ops above, with
// GPT-2's learned positions added to (and their gradient taken from) the tokens this rank's residual
// stream holds. Under TP-SP those are its slice of n / t tokens, so the position gradient is a partial
// sum the step adds over tp (wpe is replicated).
class VocabParallelOps : public VocabOps {
 public:
  VocabParallelOps(Communicator& tp, int64_t V, bool sequence_parallel);

  int64_t lo() const override { return shard_.lo; }
  int64_t rows(int64_t V) const override;
  void embedding_forward(float* e, const int* ids, const int* positions, const float* E, const float* P,
                         int64_t n, int C, int chunk, OpObserver* o) override;
  void embedding_backward(float* dE, float* dP, const float* de, const int* ids, const int* positions,
                          int64_t n, int C, int chunk, OpObserver* o) override;
  void cross_entropy(float* losses, float* logits, int64_t ld, const int* targets, int64_t n, int64_t V,
                     float dloss, OpObserver* o) override;

  // The floats its scratch grows to: the embedding's partial sums or gathered gradient under TP-SP
  // (sliced_tokens x C: the micro-batch's tokens when a stage holds the embeddings, else 0) and the
  // cross-entropy's statistics (3 per logits row of its largest call, 0 without the head).
  static uint64_t scratch_floats(int64_t sliced_tokens, int C, int64_t loss_rows);
  uint64_t scratch_bytes() const { return scratch_.bytes(); }

 private:
  // Under TP-SP with more than one chunk, the ids in the order the token slices are laid out (rank q's
  // rows q R + k hold token tp_sp_token(n, t, q, k, chunk)); else ids itself.
  const int* slice_order(const int* ids, int64_t n, int chunk);
  // The token this rank's residual row k holds.
  int64_t token(int64_t n, int64_t k, int chunk) const {
    return sequence_parallel_ ? tp_sp_token(n, tp_.size(), tp_.rank(), k, chunk) : k;
  }
  int64_t held(int64_t n) const { return sequence_parallel_ ? n / tp_.size() : n; }

  Communicator& tp_;
  VocabShard shard_;
  bool sequence_parallel_;
  FloatBuffer scratch_;
  std::vector<int> ordered_;  // slice_order's
};

}  // namespace odyssey
