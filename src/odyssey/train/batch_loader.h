// The tokens one rank trains on in one micro-step (DESIGN.md, "the global batch is independent of
// the layout"): optimizer step s covers rows [s G, (s+1) G) of the data (G = global batch); in
// micro-step m, data-parallel rank d takes the contiguous rows [(m D + d) b, (m D + d + 1) b)
// (D = dp size, b = micro batch); a sequence-parallel rank then keeps its shard of every row
// (parallel/sequence_shard.h), with the tokens' global positions.
#pragma once

#include <cstdint>
#include <vector>

#include "odyssey/data/dataset.h"
#include "odyssey/parallel/sequence_shard.h"

namespace odyssey {

class BatchLoader {
 public:
  BatchLoader(const TokenDataset& data, int global_batch, int micro_batch, int dp_rank, int dp_size,
              const SequenceShard& shard);

  int rows() const { return micro_batch_; }
  int local_len() const { return int(positions_.size()); }  // tokens per row on this rank
  // Global positions of the local tokens [local_len()], for GPT2::forward.
  const int* positions() const { return positions_.data(); }

  // inputs, targets: [rows(), local_len()] for micro-step `micro` of optimizer step `step`.
  void load(int64_t step, int micro, int* inputs, int* targets);
  // The same for rows [first, first + rows()) of the data (evaluation); rows past `limit` are
  // filled with targets -1 (not counted).
  void load_rows(uint64_t first, uint64_t limit, int* inputs, int* targets);

 private:
  const TokenDataset& data_;
  int global_batch_, micro_batch_, dp_rank_, dp_size_, T_;
  std::vector<int> positions_;
  std::vector<int> full_inputs_, full_targets_;  // [rows, T] before sequence slicing
};

}  // namespace odyssey
