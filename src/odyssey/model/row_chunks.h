// The row chunks of a sequence-chunked layer (long-context-memory.md §4.1): N token rows in chunks of
// `rows` (0: one chunk of all N); chunk j covers rows [begin(j), begin(j) + size(j)), the last may be
// short. Every token-local op of a block (norms, projections, MLP, residual adds) runs chunk by chunk,
// so a recomputing layer holds their outputs for one chunk only. The forward and every recompute use
// the same chunks, hence the same GEMM shapes and the same bits.
#pragma once

#include <algorithm>
#include <cstddef>

namespace odyssey {

struct RowChunks {
  int N;     // rows in all
  int rows;  // rows per chunk (0 or >= N: one chunk)

  int chunk_rows() const { return rows > 0 ? std::min(rows, N) : N; }
  int count() const { return N == 0 ? 0 : (N + chunk_rows() - 1) / chunk_rows(); }
  int begin(int j) const { return j * chunk_rows(); }
  int size(int j) const { return std::min(chunk_rows(), N - begin(j)); }
};

// Where row r of a token-local buffer of `width` floats per row is: buffers that hold every row index
// it directly, buffers that hold one chunk (held < N) start at the chunk's first row.
inline size_t local_offset(int r, int held, int N, size_t width) {
  return (held >= N ? size_t(r) : 0) * width;
}

}  // namespace odyssey
