// The K/V prefix of a query-chunked layer (long-context-memory.md §4.3): a layer whose attention runs
// per query chunk keeps the keys and values of every row, and in backward accumulates their gradients
// for every row, while q, the attention's output, lse and their gradients hold one chunk. A layer that
// keeps its whole qkv reads the prefix there when the op's layout allows (the local op); otherwise the
// layer holds the prefix in kv, in the op's layout (KvPrefixLayout: Ulysses keeps it head-sharded),
// and the op writes each chunk's k and v there as the chunk's qkv is computed.
#pragma once

#include <cstddef>

#include "odyssey/core/buffer.h"
#include "odyssey/core/error.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/fused_qkv.h"

namespace odyssey {

// True when b holds `width` floats for each of N rows (else: one chunk of them).
inline bool holds_rows(const FloatBuffer& b, int N, size_t width) {
  return b.size() >= size_t(N) * width;
}

// The keys and values of every row: in kv when the layer holds it, else in its whole qkv [N, width].
inline KvRows kv_rows(FloatBuffer& qkv, FloatBuffer& kv, int N, const FusedQkv& f,
                      const KvPrefixLayout& layout) {
  if (kv.size() > 0) {
    const MutKvRows m = layout.view(kv.data());
    return {m.k, m.v, m.row_stride};
  }
  ODY_CHECK(layout.in_qkv && holds_rows(qkv, N, size_t(f.width())),
            "query-chunked layer: no K/V prefix for {} rows", N);
  return {qkv.data() + f.k_offset(), qkv.data() + f.v_offset(), f.width()};
}

// The op writes the k and v of a chunk's fused rows qkv [n, width] (rows [r, r + n) of sequences of T)
// into the prefix kv (nothing when the layer reads the prefix from its whole qkv: kv is empty).
inline void store_kv(FloatBuffer& kv, const float* qkv, int r, int n, AttentionOp& op,
                     const KvPrefixLayout& layout, int T, int H, int D) {
  if (kv.size() == 0) return;
  op.store_kv(layout.view(kv.data()), qkv, r, n, T, H, D);
}

}  // namespace odyssey
