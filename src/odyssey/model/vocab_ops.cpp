#include "odyssey/model/vocab_ops.h"

#include "odyssey/kernels/cross_entropy.h"
#include "odyssey/kernels/embedding.h"

namespace odyssey {

void LocalVocab::embedding_forward(float* e, const int* ids, const int* positions, const float* E,
                                   const float* P, int64_t n, int C, int /*chunk*/, OpObserver* o) {
  observed(o, "embedding.fwd", 0, [&] { odyssey::embedding_forward(e, ids, positions, E, P, int(n), C); });
}

void LocalVocab::embedding_backward(float* dE, float* dP, const float* de, const int* ids,
                                    const int* positions, int64_t n, int C, int /*chunk*/, OpObserver* o) {
  observed(o, "embedding.bwd", 0,
           [&] { odyssey::embedding_backward(dE, dP, de, ids, positions, int(n), C); });
}

void LocalVocab::cross_entropy(float* losses, float* logits, int64_t ld, const int* targets, int64_t n,
                               int64_t V, float dloss, OpObserver* o) {
  if (dloss > 0)
    observed(o, "cross_entropy.fwd_bwd", 0,
             [&] { cross_entropy_forward_backward(logits, losses, targets, int(n), int(V), dloss, ld); });
  else
    observed(o, "cross_entropy.fwd", 0,
             [&] { cross_entropy_forward(losses, logits, targets, int(n), int(V), ld); });
}

VocabOps& local_vocab() {
  static LocalVocab local;
  return local;
}

}  // namespace odyssey
