// The layer loop of a stage's forward and backward, with the activation-checkpointing policies
// (long-context-memory.md §2.2), written once for every architecture. `LayerActs` is the
// architecture's per-layer activations (residual3 the layer's output, atty and lse the attention's
// output and log-sum-exp, attention what the op saved); the block is passed as two callables:
//   fwd(acts, x, l): layer l's block forward from input x into acts;
//   bwd(acts, x, l, recompute): its backward, rerunning first what `recompute` says (model/recompute.h).
//
//   none            every layer keeps all its activations;
//   cheap           every layer keeps all but its norm outputs and MLP activation, which it recomputes
//                   chunk by chunk in its backward (into one chunk's buffers, borrowed from `work`);
//   keep_attention  a layer keeps its output, the attention's output, lse and saved tensors; the rest is
//                   recomputed in its backward, the attention not (the quadratic part);
//   full            a layer keeps its output only and is recomputed whole in its backward.
// Recomputation issues exactly the forward's calls, so every policy gives the bits of none. A
// recomputing policy's working layer holds the token-local activations of one row chunk
// (memory.chunk_tokens) and recomputes them chunk by chunk inside the backward.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/recompute.h"
#include "odyssey/model/row_chunks.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// What a micro-batch keeps of its layers, per policy.
template <typename LayerActs>
struct KeptLayers {
  CheckpointPolicy policy = CheckpointPolicy::none;
  std::vector<LayerActs> layers;  // none: everything; otherwise what the policy keeps
  LayerActs work;                 // recomputing policies: the one layer being run or recomputed
  int work_layer = -1;            // the layer whose activations `work` holds (-1: none)
  int chunks = 1;                 // row chunks per layer (work holds one of them)

  bool cheap() const { return policy == CheckpointPolicy::cheap; }
  // keep_attention and full: layers keep their output (and attention), `work` runs and reruns them.
  bool recomputes_layers() const {
    return policy == CheckpointPolicy::keep_attention || policy == CheckpointPolicy::full;
  }
  bool keeps_attention() const { return policy == CheckpointPolicy::keep_attention; }
  const float* output(size_t i) const { return layers[i].residual3.data(); }
};

// What the working layer of a recomputing policy holds (model/row_chunks.h): one chunk (`rows`) of its
// token-local activations and, with query-chunked attention, of its qkv (beside the K/V prefix) and
// under full of its attention output and lse (keep_attention hands these to the kept layer whole).
// query_chunks: the attention runs per query chunk, i.e. the local op over more than one chunk (one
// chunk of a TP-SP slice holds fewer rows than the sequence but runs the whole-sequence path).
inline LayerRows working_rows(CheckpointPolicy policy, int rows, bool query_chunks) {
  const bool full = policy == CheckpointPolicy::full;
  return {rows, rows, true, false, query_chunks ? rows : -1, query_chunks && full ? rows : -1};
}

// Runs layers [first, first + n) forward from input; layer i's input is the previous one's output.
template <typename LayerActs, typename Fwd>
void forward_layers(KeptLayers<LayerActs>& k, const float* input, int first, int n, LayerHooks& hooks,
                    int first_unit, Fwd&& fwd) {
  for (int i = 0; i < n; ++i) {
    const int l = first + i;
    hooks.before_forward(first_unit + i);
    const float* x = i == 0 ? input : k.output(size_t(i) - 1);
    LayerActs& la = k.recomputes_layers() ? k.work : k.layers[size_t(i)];
    // The working layer writes its output straight into the kept one (lent, then given back).
    if (k.recomputes_layers()) std::swap(la.residual3, k.layers[size_t(i)].residual3);
    if (k.cheap()) la.swap_cheap(k.work);
    fwd(la, x, l);
    if (k.cheap()) la.swap_cheap(k.work);
    if (k.recomputes_layers()) {
      LayerActs& kept = k.layers[size_t(i)];
      std::swap(la.residual3, kept.residual3);
      if (k.keeps_attention()) {  // moved, not copied: the buffers are the same size
        std::swap(la.atty, kept.atty);
        std::swap(la.lse, kept.lse);
        std::swap(la.attention, kept.attention);
      }
      k.work_layer = l;
    }
    hooks.after_forward(first_unit + i);
  }
}

// Runs layers [first, first + n) backward, last first, recomputing what the policy dropped.
template <typename LayerActs, typename Bwd>
void backward_layers(KeptLayers<LayerActs>& k, const float* input, int first, int n, LayerHooks& hooks,
                     int first_unit, Bwd&& bwd) {
  for (int i = n - 1; i >= 0; --i) {
    const int l = first + i;
    hooks.before_backward(first_unit + i);
    const float* x = i == 0 ? input : k.output(size_t(i) - 1);
    LayerActs& la = k.recomputes_layers() ? k.work : k.layers[size_t(i)];
    if (k.keeps_attention()) {
      LayerActs& kept = k.layers[size_t(i)];
      std::swap(la.atty, kept.atty);
      std::swap(la.lse, kept.lse);
      std::swap(la.attention, kept.attention);
    }
    // Recompute from the layer's input with the forward's own calls (same shapes: same bits). The
    // last layer's qkv and attention are still there from the forward, and with a single chunk all
    // of it.
    Recompute re;
    re.cheap = k.cheap();
    if (k.recomputes_layers()) {
      const bool fresh = k.work_layer == l;
      re.qkv = !fresh;
      re.attention = !fresh && !k.keeps_attention();
      re.token_local = !fresh || k.chunks > 1;
      k.work_layer = -1;  // the backward leaves the working layer's token-local buffers stale
    }
    if (k.cheap()) la.swap_cheap(k.work);
    bwd(la, x, l, re);
    if (k.cheap()) la.swap_cheap(k.work);
    hooks.after_backward(first_unit + i);
  }
}

}  // namespace odyssey
