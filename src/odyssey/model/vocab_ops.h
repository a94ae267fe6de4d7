// The vocabulary seam of a stage: how its token embedding and the cross-entropy of its LM head run.
// With one rank the embedding table and the head hold the whole vocabulary: LocalVocab runs exactly
// the kernels a stage always ran. Tensor parallelism (parallel/vocab_parallel.h) holds a row shard of
// the padded vocabulary on each rank and implements the same calls with its reductions
// (tensor-pipeline-parallelism.md §1.5, §1.6), as the linear seam (linear_ops.h) does for the blocks.
//
// Sizes: n is the tokens of the tensor-parallel group; the residual stream a rank holds is
// split.rows(n) of them (all, or its TP-SP slice, which starts at token split_row0()). The head's
// logits block is [n, rows()] over this rank's vocabulary rows [lo(), lo() + rows()).
#pragma once

#include <cstdint>

#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"

namespace odyssey {

class VocabOps {
 public:
  virtual ~VocabOps() = default;
  // The vocabulary rows held: [lo(), lo() + rows()) of V padded to a multiple of tp (rows >= V are
  // padding: never a token, never a target).
  virtual int64_t lo() const { return 0; }
  virtual int64_t rows(int64_t V) const { return V; }

  // e [rows(n), C] = E[ids] (+ P[positions] when P is given: GPT-2's learned positions) for this rank's
  // tokens. ids, positions [n] are the group's tokens; E [rows(V), C] this rank's table; P [T, C] whole.
  // chunk: the layers' rows per chunk, which decides the tokens a TP-SP rank holds (tp_sp_token).
  virtual void embedding_forward(float* e, const int* ids, const int* positions, const float* E,
                                 const float* P, int64_t n, int C, int chunk, OpObserver* o) = 0;
  // dE += the rows of de [rows(n), C] of the ids this rank holds; dP (when given) += de at the positions
  // of this rank's tokens (under TP-SP a partial sum over the tp group, which the step sums).
  virtual void embedding_backward(float* dE, float* dP, const float* de, const int* ids, const int* positions,
                                  int64_t n, int C, int chunk, OpObserver* o) = 0;
  // Cross-entropy of logits [n, rows(V)] (rows ld >= rows(V) floats apart) against targets [n] (< 0:
  // ignored, loss 0, gradient 0): losses [n], the same on every rank; with dloss > 0 the logits become
  // dloss * (softmax - onehot).
  virtual void cross_entropy(float* losses, float* logits, int64_t ld, const int* targets, int64_t n,
                             int64_t V, float dloss, OpObserver* o) = 0;
};

// One rank: the whole vocabulary, the stage's kernels.
class LocalVocab : public VocabOps {
 public:
  void embedding_forward(float* e, const int* ids, const int* positions, const float* E, const float* P,
                         int64_t n, int C, int chunk, OpObserver* o) override;
  void embedding_backward(float* dE, float* dP, const float* de, const int* ids, const int* positions,
                          int64_t n, int C, int chunk, OpObserver* o) override;
  void cross_entropy(float* losses, float* logits, int64_t ld, const int* targets, int64_t n, int64_t V,
                     float dloss, OpObserver* o) override;
};

// A process-wide LocalVocab (it holds no state).
VocabOps& local_vocab();

}  // namespace odyssey
