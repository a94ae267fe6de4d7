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
#include "odyssey/train/micro_batches.h"

namespace odyssey {

class BatchLoader final : public MicroBatches {
 public:
  BatchLoader(const TokenDataset& data, int global_batch, int micro_batch, int dp_rank, int dp_size,
              const SequenceShard& shard);

  int rows() const override { return micro_batch_; }
  int local_len() const override { return int(positions_.size()); }
  const int* positions() const override { return positions_.data(); }
  void load(int64_t step, int micro, int* inputs, int* targets) override;
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
