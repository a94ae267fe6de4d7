#include "odyssey/train/batch_loader.h"

#include <algorithm>

namespace odyssey {

BatchLoader::BatchLoader(const TokenDataset& data, int global_batch, int micro_batch, int dp_rank,
                         int dp_size, const SequenceShard& shard)
    : data_(data),
      global_batch_(global_batch),
      micro_batch_(micro_batch),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      T_(data.seq_len()) {
  check_sequence_shard(T_, shard);
  positions_ = shard_positions(T_, shard);
  full_inputs_.resize(size_t(micro_batch) * T_);
  full_targets_.resize(size_t(micro_batch) * T_);
}

void BatchLoader::load(int64_t step, int micro, int* inputs, int* targets) {
  uint64_t first = uint64_t(step) * uint64_t(global_batch_) +
                   uint64_t(micro * dp_size_ + dp_rank_) * uint64_t(micro_batch_);
  load_rows(first, UINT64_MAX, inputs, targets);
}

void BatchLoader::load_rows(uint64_t first, uint64_t limit, int* inputs, int* targets) {
  const size_t T = size_t(T_);
  for (int b = 0; b < micro_batch_; ++b) {
    int* in = &full_inputs_[size_t(b) * T];
    int* tg = &full_targets_[size_t(b) * T];
    if (first + uint64_t(b) < limit) {
      data_.get_row(first + uint64_t(b), in, tg);
    } else {  // padding row: any valid token, nothing counted
      std::fill(in, in + T, 0);
      std::fill(tg, tg + T, -1);
    }
  }
  shard_rows(inputs, full_inputs_.data(), micro_batch_, T_, positions_);
  shard_rows(targets, full_targets_.data(), micro_batch_, T_, positions_);
}

}  // namespace odyssey
