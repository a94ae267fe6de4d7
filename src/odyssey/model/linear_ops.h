// The linear seam of a block: how its four projections run. A block has two pairs, each a linear that
// widens (qkv, fc / gate_up: "column" linears, splitting output features under tensor parallelism)
// followed by one that narrows back to the model width (attention projection, fc_proj / down: "row"
// linears, splitting input features). With one rank both are plain linears: LocalLinears runs exactly
// the kernels a block always ran. Tensor parallelism (parallel/tp_linear.h) implements the same calls
// with Megatron's communication around them (tensor-pipeline-parallelism.md §1.2, §1.3, §1.7), as
// Ulysses implements the attention seam (attention_op.h).
//
// Sizes are this rank's: a column linear maps [n, in] (in the full model width) to [n, out] (its
// share of the output features); a row linear maps [n, in] (its share of the input features) to the
// model width out. The residual stream a rank holds is rows(n) tokens: all n, or under Megatron
// sequence parallelism (TP-SP) its slice of n / tp tokens. Inputs and output gradients in the
// residual stream's layout are [rows(n), X]; those between the pair are [n, X].
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "odyssey/model/op_observer.h"

namespace odyssey {

class DeferredWeightGrads;

// How a layer is split over a tensor-parallel group of t ranks (the shapes its buffers take).
// overlap: Domino (model/domino.h) keeps two chunks' collectives in flight, so a block's scratch for
// a column backward's dx holds two chunks.
struct TpSplit {
  int t = 1;
  bool sequence_parallel = false;
  bool overlap = false;
  int64_t rows(int64_t n) const { return sequence_parallel ? n / t : n; }
  int slots() const { return overlap ? 2 : 1; }
};

// The token of the group's n that rank q's residual row k holds under TP-SP. A rank's residual rows
// run in chunks of `chunk` rows (memory.chunk_tokens; 0: one chunk), and a chunk's column linear gathers
// the t ranks' rows of that chunk, in rank order, into t m' consecutive tokens (m' its rows: `chunk`, or
// fewer in the last): rank q's rows of chunk j are tokens j t chunk + q m' + [0, m'). With one chunk
// this is the contiguous slice [q R, (q + 1) R) of R = n / t rows. Embeddings and the LM head assign
// tokens by it, so every chunk of a layer sees consecutive tokens.
inline int64_t tp_sp_token(int64_t n, int t, int q, int64_t k, int chunk) {
  const int64_t R = n / t, m = chunk > 0 && chunk < R ? chunk : R;
  const int64_t j = k / m, i = k % m, rows = std::min(m, R - j * m);
  return j * t * m + q * rows + i;
}

// A linear's collective still in flight (Domino, tensor-pipeline-parallelism.md §2): a *_start call
// returns it; finish() waits for it and completes the call. Null: nothing was left in flight.
class LinearInFlight {
 public:
  virtual ~LinearInFlight() = default;
  virtual void finish() = 0;
};
using InFlight = std::unique_ptr<LinearInFlight>;
inline void finish(InFlight& f) {
  if (f) f->finish();
  f.reset();
}

struct LinearCall {
  int64_t n = 0;         // tokens of the tp group
  int in = 0, out = 0;   // this rank's features
  const char* tag = "";  // names the ops for an observer: "gemm.fwd.<tag>", ...
  OpObserver* observer = nullptr;
  // A column linear's y_r / dy_r rows are ld_out floats apart when wider than out (the LM head's padded
  // logits block, model/lm_head.h); 0: out. Row linears' outputs are the residual stream: always dense.
  int64_t ld_out = 0;
};

class LinearOps {
 public:
  virtual ~LinearOps() = default;
  virtual int tp() const { return 1; }
  virtual int tp_rank() const { return 0; }
  virtual bool sequence_parallel() const { return false; }
  // Whether a started collective progresses while the caller computes (Domino's communication
  // thread): the blocks then interleave their two row chunks (model/domino.h).
  virtual bool overlaps() const { return false; }
  int64_t rows(int64_t n) const { return split().rows(n); }
  TpSplit split() const { return {tp(), sequence_parallel(), overlaps()}; }

  // An activation the block computed that the next linear (or the attention) reads: rows of `cols`
  // floats, `ld` apart (0: cols): the norms' outputs, the qkv after RoPE, the attention's output, the
  // MLP activation, and in backward d(qkv), d(up) and the LM head's dlogits. Stored as computed in fp32;
  // the bf16 policy (model/bf16_linears.h) rounds it to bf16 in place, where mixed-precision.md §3
  // stores that tensor in bf16.
  virtual void store_activation(float* /*x*/, int64_t /*rows*/, int64_t /*cols*/, int64_t /*ld*/ = 0) {}

  // y_r [n, out] = x_full W_r^T + b_r; x [rows(n), in]; W_r [out, in]; b_r [out] or null.
  virtual void column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                              const LinearCall& c) = 0;
  // dx [rows(n), in] = d/dx (overwritten); dW_r += dy_r^T x_full; db_r += column sums of dy_r (db_r may
  // be null). The weight and bias gradients accumulate (micro-steps, chunks); dx never needs to.
  virtual void column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                               const float* W_r, const LinearCall& c) = 0;
  // y [rows(n), out] = (sum over ranks of x_r W_r^T) + b; x_r [n, in]; W_r [out, in]; b [out] or null,
  // replicated, added once.
  virtual void row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                           const LinearCall& c) = 0;
  // dy [rows(n), out]. dx_r [n, in] = dy_full W_r; dW_r += dy_full^T x_r; db += column sums of the dy
  // this rank holds (under TP-SP a partial sum over the tp group, which the step sums once).
  virtual void row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                            const float* W_r, const LinearCall& c) = 0;

  // Domino's halves of row_forward and column_backward: start runs the GEMMs and starts the
  // collective (row_forward: the reduction of y; column_backward: the reduction of dx, the weight
  // gradient computed while it runs), finish() waits for it and writes y (+ b) or dx. slot (0 or 1)
  // names the scratch the call holds while in flight, so two chunks' calls may be. start + finish is
  // exactly row_forward / column_backward; by default (one rank, or no overlap) start does it all.
  virtual InFlight row_forward_start(float* y, const float* x_r, const float* W_r, const float* b,
                                     const LinearCall& c, int /*slot*/) {
    row_forward(y, x_r, W_r, b, c);
    return nullptr;
  }
  virtual InFlight column_backward_start(float* dx, float* dW_r, float* db_r, const float* dy_r,
                                         const float* x, const float* W_r, const LinearCall& c,
                                         int /*slot*/) {
    column_backward(dx, dW_r, db_r, dy_r, x, W_r, c);
    return nullptr;
  }

  // The same backwards split for zero-bubble pipelines (model/deferred_weight_grads.h): dx and the
  // bias gradient now, exactly as above; the weight gradient's GEMM (local on every rank: dW_r +=
  // dy^T x with the operands this rank's GEMM reads) recorded in `later` instead of run.
  virtual void column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                                     const float* W_r, const LinearCall& c, DeferredWeightGrads& later) = 0;
  virtual void row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                                  const float* W_r, const LinearCall& c, DeferredWeightGrads& later) = 0;
};

// One rank: plain linears, each GEMM observed on its own.
class LocalLinears : public LinearOps {
 public:
  void column_forward(float* y_r, const float* x, const float* W_r, const float* b_r,
                      const LinearCall& c) override;
  void column_backward(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                       const float* W_r, const LinearCall& c) override;
  void row_forward(float* y, const float* x_r, const float* W_r, const float* b,
                   const LinearCall& c) override;
  void row_backward(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r, const float* W_r,
                    const LinearCall& c) override;
  void column_backward_input(float* dx, float* dW_r, float* db_r, const float* dy_r, const float* x,
                             const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override;
  void row_backward_input(float* dx_r, float* dW_r, float* db, const float* dy, const float* x_r,
                          const float* W_r, const LinearCall& c, DeferredWeightGrads& later) override;
};

// A process-wide LocalLinears (it holds no state).
LinearOps& local_linears();

// The pieces of a linear's backward, each observed as "gemm.dinp.<tag>", "gemm.dweight.<tag>",
// "bias_grad.colsum" (shared by the local and the tensor-parallel linears).
void observed_backward_input(const LinearCall& c, float* dinp, const float* dout, const float* weight);
void observed_backward_weight(const LinearCall& c, float* dweight, const float* dout, const float* inp);
void observed_backward_bias(const LinearCall& c, float* dbias, const float* dout, int64_t rows);
void observed_forward(const LinearCall& c, float* out, const float* inp, const float* weight,
                      const float* bias);

}  // namespace odyssey
