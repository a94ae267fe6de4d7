// The K/V prefix of a query-chunked layer (long-context-memory.md §4.3): a layer whose attention runs
// per query chunk keeps the keys and values of every row, and in backward accumulates their gradients
// for every row, while q, the attention's output, lse and their gradients hold one chunk. A layer that
// keeps its whole qkv reads the prefix there; a working layer whose qkv holds one chunk copies each
// chunk's k and v into kv [N, 2 Hkv D] as it computes them.
#pragma once

#include <algorithm>
#include <cstddef>

#include "odyssey/core/buffer.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/fused_qkv.h"

namespace odyssey {

// True when b holds `width` floats for each of N rows (else: one chunk of them).
inline bool holds_rows(const FloatBuffer& b, int N, size_t width) {
  return b.size() >= size_t(N) * width;
}

// The keys and values of every row: in qkv [N, width] when it holds every row, else in kv.
inline KvRows kv_rows(const FloatBuffer& qkv, const FloatBuffer& kv, int N, const FusedQkv& f) {
  if (holds_rows(qkv, N, size_t(f.width())))
    return {qkv.data() + f.k_offset(), qkv.data() + f.v_offset(), f.width()};
  const int64_t w = int64_t(f.Hkv) * f.D;
  return {kv.data(), kv.data() + w, 2 * w};
}

// Copies the k and v columns of a chunk's fused rows qkv [n, width] into rows [r, r + n) of kv
// (nothing when the layer keeps its whole qkv: kv is empty).
inline void store_kv(FloatBuffer& kv, const float* qkv, int r, int n, const FusedQkv& f) {
  if (kv.size() == 0) return;
  const size_t w = size_t(f.Hkv) * f.D;
  for (int i = 0; i < n; ++i) {
    const float* src = qkv + size_t(i) * size_t(f.width()) + size_t(f.k_offset());
    std::copy(src, src + 2 * w, kv.data() + (size_t(r) + size_t(i)) * 2 * w);
  }
}

// dK and dV of every row, [N, 2 Hkv D] at the start of dkv.
inline MutKvRows dkv_rows(FloatBuffer& dkv, const FusedQkv& f) {
  const int64_t w = int64_t(f.Hkv) * f.D;
  return {dkv.data(), dkv.data() + w, 2 * w};
}

// Copies rows [r, r + n) of dK and dV (complete once every query chunk from r on has run) into the k
// and v columns of the chunk's fused gradient rows dqkv [n, width].
inline void take_dkv(float* dqkv, const FloatBuffer& dkv, int r, int n, const FusedQkv& f) {
  const size_t w = size_t(f.Hkv) * f.D;
  for (int i = 0; i < n; ++i) {
    const float* src = dkv.data() + (size_t(r) + size_t(i)) * 2 * w;
    std::copy(src, src + 2 * w, dqkv + size_t(i) * size_t(f.width()) + size_t(f.k_offset()));
  }
}

}  // namespace odyssey
