// The Llama transformer block, written once (tensor-pipeline-parallelism.md §5.2, §5.3): training
// (the Llama stage), evaluation and the profile run these two functions.
//
//   x -> rmsnorm -> qkv (one GEMM: q, k, v adjacent) -> RoPE on q, k -> attention (GQA)
//     -> o_proj (+x) = residual2 -> rmsnorm -> gate|up (one GEMM) -> SwiGLU -> down_proj (+residual2)
//     = residual3
//
// Activations live in a LlamaLayerActs the caller owns (one per layer per micro-batch in flight);
// forward overwrites all of it, so a layer can be run again to recompute what it dropped. The qkv
// kept for backward is the rotated one (what attention read); RoPE's backward rotates dq, dk back.
//
// Sequence chunking (LlamaShape::chunk) as in gpt2_block.h: every token-local op (norms, projections,
// RoPE, SwiGLU, residual adds) runs over row chunks, the attention over the whole sequence or, with
// LlamaShape::query_chunks, per query chunk against the (rotated) K/V prefix.
#pragma once

#include <cstddef>
#include <functional>

#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/config.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/llama_params.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/query_chunks.h"
#include "odyssey/model/recompute.h"
#include "odyssey/model/row_chunks.h"

namespace odyssey {

// The sizes a Llama block call runs at on this rank: H query and Hkv key/value heads of D dims, MLP
// width F; chunk: rows per token-local chunk (0: all N at once). Under tensor parallelism over t
// ranks (§1.8) a rank runs H/t query heads, F/t MLP features and Hkv/t key/value heads, or, when t
// exceeds the key/value heads, the one its query heads read (replicated on t/Hkv ranks).
struct LlamaShape {
  int B, T, C, H, Hkv, D, F;
  float eps;
  int chunk = 0;
  QueryChunks query_chunks = {};  // the attention per query chunk against the K/V prefix (gpt2_block.h)
  int N() const { return B * T; }
  int qkv_width() const { return (H + 2 * Hkv) * D; }
  // Fails naming model.n_head, model.n_kv_head or model.d_ff when the model does not split over tp.
  static LlamaShape of(const ModelConfig& c, int B, int T, int chunk = 0, const TpSplit& tp = {});
};

// RoPE's cos and sin [N, D/2] of a micro-batch's tokens (computed once, shared by the layers).
struct RopeTables {
  const float* cos;
  const float* sin;
};

// One layer's activations for B rows of T tokens (N = B*T). The token-local buffers hold all N rows
// or one chunk: LayerRows says which, for the stored group (residual2, gate_up, statistics) and the
// cheap one (an, bn, h).
struct LlamaLayerActs {
  FloatBuffer an, an_rstd;  // [N, C], [N]  rmsnorm(x)
  FloatBuffer qkv;          // [N, (H + 2 Hkv) D] after RoPE; empty when the attention op saves its own
  FloatBuffer kv;  // [N, 2 Hkv D] K (after RoPE) and V of every row (the op's layout) beside a chunk's qkv
  FloatBuffer atty, lse;        // [N, H D], [B, H, T] (or one query chunk's)
  FloatBuffer residual2;        // [N, C]  x + attention
  FloatBuffer bn, bn_rstd;      // [N, C], [N]  rmsnorm(residual2)
  FloatBuffer gate_up;          // [N, 2F]
  FloatBuffer h;                // [N, F]  silu(gate) * up
  FloatBuffer residual3;        // [N, C]  block output
  AttentionSavedPtr attention;  // what the attention op saved for backward (opaque)

  void allocate(const ModelConfig& config, int B, int T, bool keep_qkv, const LayerRows& rows = {},
                const TpSplit& tp = {});
  size_t bytes() const;
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool keep_qkv, const LayerRows& rows = {},
                          const TpSplit& tp = {});
  // Exchanges the cheap group (an, bn, h) with another layer's (see Gpt2LayerActs::swap_cheap).
  void swap_cheap(LlamaLayerActs& other);
};

// Buffers the layers of a micro-batch share: the qkv when layers keep none, and backward's
// activation gradients (c rows: one chunk). With query chunks (more than one chunk) datty and dqkv
// hold one chunk and dkv the dK, dV of every row; key-outer (ring, hybrid: QueryChunks::key_outer)
// there is no dqkv, the op writes it over the qkv. head_grad(): a buffer of at least R x C floats idle
// while the LM head runs (datty, max(C, H D) wide, when it holds every row, else dkv, at least C wide),
// which the head borrows for its own buffers on long sequences (lm_head_borrows_scratch, lm_head.h).
struct LlamaBlockScratch {
  FloatBuffer qkv;           // [N, (H + 2 Hkv) D] only when layers keep no qkv
  FloatBuffer datty, dqkv;   // [N, max(C, H D)], [N, (H + 2 Hkv) D] (query chunks: [c, H D], [c, ...])
  FloatBuffer dkv;           // query chunks: [N, max(C, 2 Hkv D)]
  FloatBuffer dnorm;         // [c, C]
  FloatBuffer dh, dgate_up;  // [c, F], [c, 2F]

  void allocate(const ModelConfig& config, int B, int T, bool shared_qkv, bool backward, int chunk = 0,
                const TpSplit& tp = {}, const QueryChunks& query_chunks = {});
  float* head_grad() { return dkv.size() ? dkv.data() : datty.data(); }
  size_t bytes() const;
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool shared_qkv, bool backward,
                          int chunk = 0, const TpSplit& tp = {}, const QueryChunks& query_chunks = {});
};

// Where one layer's tensors are now (parameters or gradients); q|k|v and gate|up are adjacent in the
// table, so qkv_w is the [(H + 2 Hkv) D, C] matrix starting at q and gate_up_w the [2F, C] one at gate.
struct LlamaLayerTensors {
  float *attn_norm, *qkv_w, *o_w, *mlp_norm, *gate_up_w, *down_w;
};
LlamaLayerTensors resolve_llama_layer(const LlamaLayerParams& layer,
                                      const std::function<float*(const ParamInfo&)>& at);

// a = block(x); x [R, C] is not modified (R = linears.rows(N); s is LlamaShape::of(config, B, T,
// chunk, linears.split()), and the attention op serves s.Hkv key/value heads).
void llama_block_forward(LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                         AttentionOp& attention, LinearOps& linears, LlamaBlockScratch& scratch,
                         const LlamaShape& s, const RopeTables& rope, OpObserver* observer = nullptr);

// dres [R, C]: d(block output) in, d(x) out. Gradients accumulate into g (under TP-SP the norms' are
// partial sums over this rank's tokens, which the step sums over tp). recompute: what a checkpoint
// policy dropped and the backward reruns first (model/layer_loop.h).
void llama_block_backward(float* dres, LlamaLayerActs& a, const float* x, const LlamaLayerTensors& w,
                          const LlamaLayerTensors& g, AttentionOp& attention, LinearOps& linears,
                          LlamaBlockScratch& scratch, const LlamaShape& s, const RopeTables& rope,
                          OpObserver* observer = nullptr, const Recompute& recompute = {});

}  // namespace odyssey
