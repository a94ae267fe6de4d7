// The GPT-2 transformer block, written once: training (GPT2's stage), evaluation, the KV cache and
// the profiling benchmark all run these two functions.
//
//   x -> ln1 -> qkv -> attention -> attn_proj (+x) = residual2 -> ln2 -> fc -> gelu -> fc_proj (+residual2)
//     = residual3
//
// Activations live in a Gpt2LayerActs the caller owns (one per layer per micro-batch in flight);
// forward overwrites all of it, so a layer can be run again to recompute what it dropped.
//
// Sequence chunking (BlockShape::chunk, model/row_chunks.h): every token-local op runs over chunks of
// rows. The attention runs either over the whole sequence through the AttentionOp (ring, the hybrid
// and TP-SP need it whole): the forward runs ln1 + qkv chunk by chunk, the attention, then the rest
// chunk by chunk; the backward the MLP and projection backward chunk by chunk, the attention backward,
// then the qkv and ln1 backward chunk by chunk; sequence-wide are x, qkv, the attention's output and
// lse, the output, and in backward d(residual), d(atty) and dqkv (key-outer, under the ring and the
// hybrid: none beside the qkv, which the op overwrites with it, §4.8). Or, with BlockShape::query_chunks
// (model/query_chunks.h: an op that chunks_queries(), the local one or Ulysses), per query chunk
// against the K/V prefix (long-context-memory.md §4.2, §4.3, §4.8, model/kv_prefix.h), the chunks
// within sequences: the forward runs each chunk whole (ln1, qkv, the op storing its k and v into the
// prefix, its queries' attention, the rest), the backward walks the chunks last first (recompute, MLP
// backward, its queries' attention backward into dq and the prefix's dK, dV, which the op adds into
// the chunk's dqkv once complete, then the qkv and ln1 backward); sequence-wide are x, K and V (in the
// op's layout: Ulysses' head-sharded), the output, and in backward d(residual), dK and dV.
#pragma once

#include <cstddef>
#include <functional>

#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/config.h"
#include "odyssey/model/gpt2_params.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/query_chunks.h"
#include "odyssey/model/recompute.h"
#include "odyssey/model/row_chunks.h"

namespace odyssey {

// One layer's activations for B rows of T tokens (N = B*T), kept for its backward. Buffers may be
// larger than a call needs (the KV cache sizes them for its whole context once). The token-local
// buffers hold all N rows (kept for backward) or one chunk (recomputed per chunk): LayerRows says
// which, for the stored group (residual2, fch, statistics) and the cheap one (ln1, ln2, fch_gelu).
struct Gpt2LayerActs {
  FloatBuffer ln1, ln1_mean, ln1_rstd;  // [N, C], [N], [N]
  FloatBuffer qkv;                      // [N, 3C]; empty when the attention op saves its own copy
  FloatBuffer kv;                       // [N, 2C] K and V of every row when qkv holds one chunk
  FloatBuffer atty, lse;                // [N, C], [B, H, T] (or one query chunk's)
  FloatBuffer residual2;                // [N, C]  x + attn(x)
  FloatBuffer ln2, ln2_mean, ln2_rstd;  // [N, C], [N], [N]
  FloatBuffer fch, fch_gelu;            // [N, 4C]
  FloatBuffer residual3;                // [N, C]  block output
  AttentionSavedPtr attention;          // what the attention op saved for backward (opaque)

  // tp: how the layer is split over a tensor-parallel group (model/linear_ops.h).
  void allocate(const ModelConfig& config, int B, int T, bool keep_qkv, const LayerRows& rows = {},
                const TpSplit& tp = {});
  size_t bytes() const;  // attention's saved tensors included
  // What allocate(config, B, T, keep_qkv, rows, tp) holds (the attention's saved tensors not included).
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool keep_qkv, const LayerRows& rows = {},
                          const TpSplit& tp = {});
  // Exchanges the cheap group (ln1, ln2, fch_gelu) with another layer's: the cheap policy's layers
  // borrow one chunk's worth from the working layer.
  void swap_cheap(Gpt2LayerActs& other);
};

// Buffers every layer of a micro-batch shares: the qkv when layers keep none, and backward's
// activation gradients (c rows: one chunk, see BlockShape::chunk). With query chunks (and more than
// one chunk) datty and dqkv hold one chunk, dkv the dK and dV of every row; key-outer (ring, hybrid:
// QueryChunks::key_outer) there is no dqkv, the op writes it over the qkv. head_grad(): a buffer of
// at least R x C floats idle while the LM head runs (datty when it holds every row, else dkv), which
// the head borrows for its own buffers on long sequences (lm_head_borrows_scratch, model/lm_head.h).
struct Gpt2BlockScratch {
  FloatBuffer qkv;              // [N, 3C] only when layers keep no qkv
  FloatBuffer datty, dqkv;      // [N, C], [N, 3C] (query chunks: [c, C], [c, 3C])
  FloatBuffer dkv;              // query chunks: [N, 2C]
  FloatBuffer dln;              // [c, C]
  FloatBuffer dfch, dfch_gelu;  // [c, 4C]

  void allocate(const ModelConfig& config, int B, int T, bool shared_qkv, bool backward, int chunk = 0,
                const TpSplit& tp = {}, const QueryChunks& query_chunks = {});
  size_t bytes() const;
  static size_t bytes_for(const ModelConfig& config, int B, int T, bool shared_qkv, bool backward,
                          int chunk = 0, const TpSplit& tp = {}, const QueryChunks& query_chunks = {});
  float* head_grad() { return dkv.size() ? dkv.data() : datty.data(); }
};

// Where one layer's tensors are now (parameters or gradients): a unit's storage moves under ZeRO-3,
// so the caller resolves them per call.
struct Gpt2LayerTensors {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fc_proj_w,
      *fc_proj_b;
};
Gpt2LayerTensors resolve_layer(const LayerParams& layer, const std::function<float*(const ParamInfo&)>& at);

// The sizes a block call runs at; chunk: rows per token-local chunk (0: all N at once); query_chunks:
// whether the attention runs per chunk against the K/V prefix, and how the prefix is held
// (model/query_chunks.h; the activations and scratch sized for it).
struct BlockShape {
  int B, T, C, H;
  int chunk = 0;
  QueryChunks query_chunks = {};
  int N() const { return B * T; }
  int D() const { return C / H; }
};

// a = block(x); x [R, C] is not modified (it is the previous layer's residual3 or the embeddings; R =
// linears.rows(N): every token, or this rank's TP-SP slice). The projections run through the linear
// seam (model/linear_ops.h): local_linears() in one process, tensor-parallel linears under tp.
void gpt2_block_forward(Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w, AttentionOp& attention,
                        LinearOps& linears, Gpt2BlockScratch& scratch, const BlockShape& s,
                        OpObserver* observer = nullptr);

// dres [R, C]: d(block output) in, d(x) out. Gradients accumulate into g (under TP-SP the norms' and
// row biases' are partial sums over this rank's tokens, which the step sums over tp). recompute: what
// a checkpoint policy dropped and the backward reruns first, with the forward's own calls
// (model/layer_loop.h).
void gpt2_block_backward(float* dres, Gpt2LayerActs& a, const float* x, const Gpt2LayerTensors& w,
                         const Gpt2LayerTensors& g, AttentionOp& attention, LinearOps& linears,
                         Gpt2BlockScratch& scratch, const BlockShape& s, OpObserver* observer = nullptr,
                         const Recompute& recompute = {});

}  // namespace odyssey
