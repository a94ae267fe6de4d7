// An architecture's transformer block, as the one block runner (model/block_runner.h) runs it for every
// architecture (Megatron's ModuleSpec over one TransformerLayer, as plain data):
//
//   x -> norm -> qkv (+ bias) [-> RoPE on q, k] -> attention -> proj (+ bias) (+x) = residual2
//     -> norm -> up (+ bias) -> activation -> down (+ bias) (+residual2) = residual3
//
// The architecture says which norm and which activation (their forward and backward), whether RoPE
// rotates q and k, the names its MLP linears are observed by, and this rank's sizes; the runner owns
// everything else: the buffers, row chunks, query chunks against the K/V prefix, the recompute
// policies, the disk tier's layer I/O and Domino's interleave. A linear without a bias (null) has none.
#pragma once

#include <cstddef>
#include <functional>

#include "odyssey/core/bf16.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/config.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/params.h"
#include "odyssey/model/query_chunks.h"
#include "odyssey/model/row_chunks.h"

namespace odyssey {

// This rank's sizes of a block: the model width C, H query and Hkv key/value heads of D dims, the MLP's
// up linear's output width (its features on this rank) and its activation's output width, the norms'
// epsilon.
struct BlockDims {
  int C, H, Hkv, D, up, act;
  float eps;
  int qkv_width() const { return (H + 2 * Hkv) * D; }
  int attention_width() const { return H * D; }
};

// The norm before the attention and before the MLP (one kind for both, and for the final norm): y [n, C]
// from x; statistics per row (rstd, and with `bias` a LayerNorm's mean: RMSNorm has no bias and no mean).
// backward accumulates dx, dw (and db).
struct BlockNorm {
  const char* forward_tag;  // the observer's names of the calls
  const char* backward_tag;
  bool bias;
  void (*forward)(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int n,
                  int C, float eps);
  void (*backward)(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                   const float* mean, const float* rstd, int n, int C);
};

// The MLP's activation: y [n, width] from the up linear's output u [n, up_per_act * width] (GELU: 1;
// SwiGLU: 2, gate | up); backward overwrites du from dy.
struct BlockActivation {
  const char* forward_tag;
  const char* backward_tag;
  void (*forward)(float* y, const float* u, int n, int width);
  void (*backward)(float* du, const float* dy, const float* u, int n, int width);
};

struct BlockSpec {
  BlockNorm norm;
  BlockActivation activation;
  bool rope;           // RoPE on q and k (the stage computes the tables)
  const char* up_tag;  // the MLP linears' names ("fc", "fc_proj")
  const char* down_tag;
  // This rank's sizes under tensor parallelism; fails naming the key when the model does not split.
  BlockDims (*dims)(const ModelConfig& config, const TpSplit& tp);
};

// One layer's tensors in the block's order (parameters or gradients; null: the architecture has none).
// Under tensor parallelism this rank's pieces: qkv and up by output rows, proj and down by input columns.
template <typename T>
struct BlockSlots {
  T norm1_w{}, norm1_b{}, qkv_w{}, qkv_b{}, proj_w{}, proj_b{}, norm2_w{}, norm2_b{}, up_w{}, up_b{},
      down_w{}, down_b{};
};
using BlockTensors = BlockSlots<float*>;
using BlockParamInfos = BlockSlots<const ParamInfo*>;
// Where a layer's tensors are now: a unit's storage moves under ZeRO-3, so the caller resolves per call.
BlockTensors resolve_block(const BlockParamInfos& layer, const std::function<float*(const ParamInfo&)>& at);

// RoPE's cos and sin [N, D/2] of a micro-batch's tokens (computed once by the stage, shared by the layers).
struct RopeTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// The sizes a block call runs at: B rows of T tokens, this rank's dims; chunk: rows per token-local
// chunk (0: all N at once); query_chunks: the attention per query chunk against the K/V prefix, and how
// the prefix is held (model/query_chunks.h; the activations and scratch sized for it).
struct BlockShape {
  int B, T;
  BlockDims d;
  int chunk = 0;
  QueryChunks query_chunks = {};
  int N() const { return B * T; }
};

using Bf16Buffer = AlignedBuffer<bf16>;

// Which of the tensors the bf16 policy rounds a layer holds in 2 bytes (BlockActs' *_h): none (fp32,
// and every layer under train.precision = fp32), all six, or only the attention output (the working
// layer of keep_attention, which exchanges it with the kept layers: the working layer computes in fp32
// buffers of its own, so 2-byte ones would only add the fp32 copy a call computes on).
enum class Bf16Held { none, all, attention };

// One layer's activations for B rows of T tokens (N = B*T), kept for its backward. Buffers may be larger
// than a call needs (the KV cache sizes them for its whole context once). The token-local buffers hold
// all N rows (kept for backward) or one chunk (recomputed per chunk): LayerRows says which, for the
// stored group (residual2, up, statistics) and the cheap one (norm1, norm2, act).
struct BlockActs {
  FloatBuffer norm1, norm1_mean, norm1_rstd;  // [N, C], [N] (LayerNorm only), [N]
  FloatBuffer qkv;        // [N, (H + 2 Hkv) D] (after RoPE); empty when the attention op saves its own
  FloatBuffer kv;         // [N, K] the K/V prefix of every row (the op's layout) beside a chunk's qkv
  FloatBuffer atty, lse;  // [N, H D], [B, H, T] (or one query chunk's)
  FloatBuffer residual2;  // [N, C]  x + attention
  FloatBuffer norm2, norm2_mean, norm2_rstd;
  FloatBuffer up, act;          // [N, up], [N, act]  the MLP's up linear's output and its activation
  FloatBuffer residual3;        // [N, C]  block output
  AttentionSavedPtr attention;  // what the attention op saved for backward (opaque)
  // bf16 (train.precision = bf16, MemoryOptions::bf16): the tensors the policy rounds to bf16 (norm1,
  // qkv, atty, norm2, up, act) are held here in 2 bytes each, and their fp32 buffers above are empty. A
  // block call computes on fp32 copies (BlockWide, in the scratch): widened exactly, narrowed exactly
  // (the values are bf16 values), so the numbers are those of fp32 buffers holding them.
  Bf16Buffer norm1_h, qkv_h, atty_h, norm2_h, up_h, act_h;

  void allocate(const BlockSpec& spec, const BlockDims& d, int B, int T, bool keep_qkv,
                const LayerRows& rows = {}, const TpSplit& tp = {}, Bf16Held bf16 = Bf16Held::none);
  size_t bytes() const;  // attention's saved tensors included
  // What allocate(spec, d, B, T, keep_qkv, rows, tp, bf16) holds (the attention's saved tensors not
  // included).
  static size_t bytes_for(const BlockSpec& spec, const BlockDims& d, int B, int T, bool keep_qkv,
                          const LayerRows& rows = {}, const TpSplit& tp = {}, Bf16Held bf16 = Bf16Held::none);
  // Exchanges the cheap group (norm1, norm2, act) with another layer's: the cheap policy's layers borrow
  // one chunk's worth from the working layer.
  void swap_cheap(BlockActs& other);
  // Exchanges the attention's output, lse and saved tensors with another layer's (keep_attention moves
  // them between the working layer and the kept one).
  void swap_attention(BlockActs& other);
};

// The fp32 buffers a block call computes on when its layer holds the bf16 tensors in 2 bytes
// (BlockActs::*_h): one set per micro-batch (in its scratch), each as large as the layers' bf16 buffer
// of the same name, lent to the layer for the call (model/block_runner.cpp). Empty under fp32.
struct BlockWide {
  FloatBuffer norm1, qkv, atty, norm2, up, act;
  // Fits each to the larger of a's and b's bf16 buffer (a kept layer's and the working layer's).
  void fit(const BlockActs& a, const BlockActs& b);
  size_t bytes() const;
  // What fit() holds for layers allocated with (rows_a, tp, held_a) and (rows_b, tp, held_b).
  static size_t bytes_for(const BlockSpec& spec, const BlockDims& d, int B, int T, bool keep_qkv,
                          const LayerRows& rows_a, Bf16Held held_a, const LayerRows& rows_b, Bf16Held held_b,
                          const TpSplit& tp);
};

// Buffers every layer of a micro-batch shares: the qkv when layers keep none, and backward's activation
// gradients (c rows: one chunk, see BlockShape::chunk). With query chunks (and more than one chunk)
// datty and dqkv hold one chunk, dkv the dK and dV of every row; key-outer (ring, hybrid:
// QueryChunks::key_outer) there is no dqkv, the op writes it over the qkv. head_grad(): a buffer of at
// least R x C floats idle while the LM head runs (datty when it holds every row, else dkv), which the
// head borrows for its own buffers on long sequences (lm_head_borrows_scratch, model/lm_head.h).
struct BlockScratch {
  FloatBuffer qkv;          // [N, (H + 2 Hkv) D] only when layers keep no qkv
  FloatBuffer datty, dqkv;  // [N, max(H D, C)], [N, (H + 2 Hkv) D] (query chunks: one chunk's)
  FloatBuffer dkv;          // query chunks: [N, max(K, C)]
  FloatBuffer dnorm;        // [c, C] (Domino: two chunks')
  FloatBuffer dact, dup;    // [c, act], [c, up]
  BlockWide wide;           // bf16 layers: the fp32 buffers a call computes on (sized by the stage)

  void allocate(const BlockDims& d, int B, int T, bool shared_qkv, bool backward, int chunk = 0,
                const TpSplit& tp = {}, const QueryChunks& query_chunks = {});
  size_t bytes() const;
  static size_t bytes_for(const BlockDims& d, int B, int T, bool shared_qkv, bool backward, int chunk = 0,
                          const TpSplit& tp = {}, const QueryChunks& query_chunks = {});
  float* head_grad() { return dkv.size() ? dkv.data() : datty.data(); }
};

}  // namespace odyssey
