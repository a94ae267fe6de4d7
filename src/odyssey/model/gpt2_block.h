// The GPT-2 transformer block, written once: training (GPT2's stage), evaluation, the KV cache and
// the profiling benchmark all run these two functions.
//
//   x -> ln1 -> qkv -> attention -> attn_proj (+x) = residual2 -> ln2 -> fc -> gelu -> fc_proj (+residual2)
//     = residual3
//
// Activations live in a Gpt2LayerActs the caller owns (one per layer per micro-batch in flight);
// forward overwrites all of it, so a layer can be run again to recompute what it dropped.
#pragma once

#include <cstddef>
#include <functional>

#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/config.h"
#include "odyssey/model/gpt2_params.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"

namespace odyssey {

// One layer's activations for B rows of T tokens (N = B*T), kept for its backward. Buffers may be
// larger than a call needs (the KV cache sizes them for its whole context once).
struct Gpt2LayerActs {
  FloatBuffer ln1, ln1_mean, ln1_rstd;  // [N, C], [N], [N]
  FloatBuffer qkv;                      // [N, 3C]; empty when the attention op saves its own copy
  FloatBuffer atty, lse;                // [N, C], [B, H, T]
  FloatBuffer residual2;                // [N, C]  x + attn(x)
  FloatBuffer ln2, ln2_mean, ln2_rstd;  // [N, C], [N], [N]
  FloatBuffer fch, fch_gelu;            // [N, 4C]
  FloatBuffer residual3;                // [N, C]  block output
  AttentionSavedPtr attention;          // what the attention op saved for backward (opaque)

  void allocate(const ModelConfig& config, int B, int T, bool keep_qkv, const TpSplit& tp = {});
  size_t bytes() const;  // attention's saved tensors included
  // What allocate(config, B, T, keep_qkv, tp) holds (the attention's saved tensors not included).
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool keep_qkv, const TpSplit& tp = {});
};

// Buffers every layer of a micro-batch shares: the qkv when layers keep none, and backward's
// activation gradients.
struct Gpt2BlockScratch {
  FloatBuffer qkv;               // [N, 3C] only when layers keep no qkv
  FloatBuffer dln, datty, dqkv;  // [N, C], [N, C], [N, 3C]
  FloatBuffer dfch, dfch_gelu;   // [N, 4C]

  void allocate(const ModelConfig& config, int B, int T, bool shared_qkv, bool backward,
                const TpSplit& tp = {});
  size_t bytes() const;
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool shared_qkv, bool backward,
                          const TpSplit& tp = {});
};

// Where one layer's tensors are now (parameters or gradients): a unit's storage moves under ZeRO-3,
// so the caller resolves them per call.
struct Gpt2LayerTensors {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fc_proj_w,
      *fc_proj_b;
};
Gpt2LayerTensors resolve_layer(const LayerParams& layer, const std::function<float*(const ParamInfo&)>& at);

// The sizes a block call runs at.
struct BlockShape {
  int B, T, C, H;
  int N() const { return B * T; }
  int D() const { return C / H; }
};

// a = block(x); x [R, C] is not modified (R = linears.rows(N): every token, or this rank's TP-SP slice;
// the linears' communication is the LinearOps seam, model/linear_ops.h). attention_kept: a.atty, a.lse and
// a.attention already hold this layer's attention (kept by a checkpoint policy), which is not run again;
// everything else is recomputed. (it is the previous layer's residual3 or the embeddings).
void gpt2_block_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                        LinearOps& linears, Gpt2BlockScratch& scratch, const BlockShape& s,
                        OpObserver* observer = nullptr, bool attention_kept = false);

// dres [R, C]: d(block output) in, d(x) out. Gradients accumulate into g (under TP-SP the norms' and
// row biases' are partial sums over this rank's tokens, summed over tp by the step).
void gpt2_block_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                         const Gpt2LayerTensors& g, AttentionOp& attention, LinearOps& linears,
                         Gpt2BlockScratch& scratch, const BlockShape& s, OpObserver* observer = nullptr);

}  // namespace odyssey
