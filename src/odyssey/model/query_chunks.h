// Whether a layer's attention runs per query chunk against the K/V prefix (long-context-memory.md
// §4.2, §4.3, §4.8), decided in one place for the stage, its activations and its blocks: the attention
// op can (the local op, Ulysses without a ring), the layer is not split over TP-SP (whose chunks gather
// every rank's tokens and run the whole-sequence attention), and the layer's rows make more than one
// chunk. Under Domino (split.overlap) the chunks are its two halves, each attending against the K/V
// prefix, so the second half's attention hides the first half's reduction; when per-sequence chunks
// would make more than two (domino_split = rows with more than two rows), the halves run the
// whole-sequence attention instead (the interleaved schedule, model/domino.h, keeps two in flight).
// Query-chunked layers chunk their rows per sequence (RowChunks::seq). Under the ring and the hybrid
// (an op whose backward_in_place()) a layer takes §4.8's key-outer form instead (key_outer).
#pragma once

#include <cstdint>

#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/row_chunks.h"

namespace odyssey {

struct QueryChunks {
  bool on = false;
  KvPrefixLayout kv;  // how the layers hold the K/V prefix (with on)
  // The key-outer form of §4.8 (ring, hybrid: not `on`): the op's ring steps are the outer loop over
  // the layer's whole q, K, V, out and lse, and its backward writes the gradient over the layer's qkv
  // (AttentionOp::backward_in_place), so the layer holds no sequence-wide dqkv.
  bool key_outer = false;
  bool operator==(const QueryChunks&) const = default;

  // The layer's row chunks: rows residual rows of sequences of T tokens in chunks of `chunk`.
  RowChunks rows(int rows, int chunk, int T) const { return {rows, chunk, on ? T : 0}; }
  // The LayerRows of a layer holding its qkv for `r.qkv` rows (-1: all), with the prefix beside it
  // when the attention runs per query chunk and the qkv cannot serve it.
  LayerRows with_kv(LayerRows r) const {
    if (on && r.sequence && (r.qkv >= 0 || !kv.in_qkv)) r.kv = kv.width();
    return r;
  }
};

// rows: the layer's residual rows (B T, or under TP-SP this rank's slice) of sequences of T tokens;
// chunk: memory.chunk_tokens; H, D: this rank's query heads and head dimension.
inline QueryChunks query_chunks(const AttentionSizing& op, const TpSplit& split, int64_t rows, int chunk,
                                int T, int H, int D) {
  QueryChunks q;
  q.on = op.chunks_queries() && !(split.t > 1 && split.sequence_parallel) &&
         RowChunks{int(rows), chunk}.count() > 1 &&
         (!split.overlap || q.rows(int(rows), chunk, T).count() == 2);
  if (q.on) q.kv = op.kv_prefix(H, D);
  q.key_outer = !q.on && op.backward_in_place();
  return q;
}

// Where a layer's whole-sequence attention backward puts d(qkv) (n floats, zeroed): the scratch
// dqkv, or key-outer the layer's qkv itself (an op that saves_qkv() accumulates into it; the ring
// reads it first and writes over it: AttentionOp::backward_in_place).
inline float* qkv_grad(float* qkv, FloatBuffer& dqkv, size_t n, const QueryChunks& q, const AttentionOp& op) {
  float* d = q.key_outer ? qkv : dqkv.data();
  if (!q.key_outer || op.saves_qkv()) fill_zero(d, n);
  return d;
}

}  // namespace odyssey
