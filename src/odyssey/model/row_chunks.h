// The row chunks of a sequence-chunked layer (long-context-memory.md §4.1): N token rows in chunks of
// `rows` (0: one chunk of all N); chunk j covers rows [begin(j), begin(j) + size(j)), the last may be
// short. Every token-local op of a block (norms, projections, MLP, residual adds) runs chunk by chunk,
// so a recomputing layer holds their outputs for one chunk only. The forward and every recompute use
// the same chunks, hence the same GEMM shapes and the same bits.
//
// With `seq` (rows per sequence, the layer's T) chunks do not cross sequences: each of the N / seq
// sequences runs in chunks of its own, its last one short when `rows` does not divide seq. A
// query-chunked layer (model/query_chunks.h) chunks this way, so that a chunk's queries are one
// sequence's consecutive tokens (under Ulysses, one dealt chunk of every rank: sequence_shard.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "odyssey/core/buffer.h"

namespace odyssey {

struct RowChunks {
  int N;        // rows in all
  int rows;     // rows per chunk (0 or >= N: one chunk)
  int seq = 0;  // rows per sequence when chunks stay within sequences (0: they may span them)

  // Chunks stay within sequences: asked for, and more than one chunk.
  bool per_sequence() const { return seq > 0 && rows > 0 && rows < N; }
  int chunk_rows() const { return rows > 0 ? std::min(rows, per_sequence() ? seq : N) : N; }
  // Chunks of one sequence (per_sequence()), of all N rows otherwise.
  int per_seq() const { return per_sequence() ? (seq + chunk_rows() - 1) / chunk_rows() : 0; }
  int count() const {
    if (N == 0) return 0;
    return per_sequence() ? N / seq * per_seq() : (N + chunk_rows() - 1) / chunk_rows();
  }
  int begin(int j) const {
    return per_sequence() ? j / per_seq() * seq + j % per_seq() * chunk_rows() : j * chunk_rows();
  }
  int size(int j) const {
    return per_sequence() ? std::min(chunk_rows(), seq - j % per_seq() * chunk_rows())
                          : std::min(chunk_rows(), N - begin(j));
  }
};

// Calls f(b, t0, m, i) for each piece of the rows [r, r + n) within one sequence of T tokens: chunk rows
// [i, i + m) are the tokens [t0, t0 + m) of sequence b (a query chunk is one piece: RowChunks::seq).
template <typename F>
void for_each_piece(int r, int n, int T, F&& f) {
  for (int i = 0; i < n;) {
    const int b = (r + i) / T, t0 = (r + i) % T, m = std::min(n - i, T - t0);
    f(b, t0, m, i);
    i += m;
  }
}

// Row r of a token-local buffer of `width` floats per row: a buffer that holds all N rows is indexed
// directly, one that holds a single chunk starts at the chunk's first row.
inline float* row_at(FloatBuffer& b, int r, int N, size_t width) {
  return b.data() + (b.size() >= size_t(N) * width ? size_t(r) * width : 0);
}

// How many rows each group of a layer's activation buffers holds (-1: all N, 0: none): what a layer
// keeps for its backward (`stored`), what the `cheap` policy recomputes instead of keeping (the norm
// outputs and the MLP activation), the attention tensors and the output. A layer whose attention runs
// per query chunk (model/kv_prefix.h) may hold its qkv for one chunk, with the K/V of every row beside
// it (`qkv`), and its attention output and lse for one chunk (`attention`).
struct LayerRows {
  int stored = -1;
  int cheap = -1;
  bool sequence = true;  // false: no qkv, attention output or lse at all
  bool output = true;
  int qkv = -1;
  int attention = -1;
  int64_t kv = 0;  // floats per token row of the K/V prefix held beside the qkv (0: none)

  // The groups' rows resolved for a layer of N token rows and Rn residual-stream rows (all N, or the
  // TP-SP slice): stored and cheap count residual rows, qkv and attention token rows; kv is floats per
  // token row. Every architecture's block sizes its buffers from these.
  struct Counts {
    size_t stored, cheap, qkv, attention, kv;
  };
  Counts counts(size_t N, size_t Rn) const {
    auto of = [](int r, size_t all) { return r < 0 ? all : std::min(size_t(r), all); };
    return {of(stored, Rn), of(cheap, Rn), sequence ? of(qkv, N) : 0, sequence ? of(attention, N) : 0,
            sequence ? size_t(kv) : 0};
  }
};

}  // namespace odyssey
