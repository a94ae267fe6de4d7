// Sharding the flat parameter buffer over the data-parallel ranks: offset arithmetic only.
//
// A range of n elements is padded to a multiple of the P ranks (never assumed divisible); rank r owns
// [r*S, (r+1)*S) of the padded range, S = padded / P. The padding is zero and never trained.
//
// A Partition cuts the whole buffer into segments — contiguous runs of whole units (a gradient
// bucket, or one unit for ZeRO-3) — and shards each segment on its own, so every segment can be
// reduce-scattered or all-gathered with equal counts per rank. With one segment it is the plain
// sharding of the whole buffer. Three coordinate systems:
//   dense:  offsets of the ParamTable (what the model and checkpoints use), [0, total)
//   padded: every segment followed by its padding, [0, padded_total); segment i at padded_begin
//   local:  this rank's slices of all segments back to back, [0, local_total); segment i at local_begin
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "odyssey/model/params.h"

namespace odyssey {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

inline Range intersect(Range a, Range b) {
  Range r{a.begin > b.begin ? a.begin : b.begin, a.end < b.end ? a.end : b.end};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

// n elements over P ranks.
struct ShardLayout {
  int64_t numel = 0;   // elements before padding
  int64_t padded = 0;  // multiple of ranks, >= numel
  int64_t shard = 0;   // padded / ranks
  int ranks = 1;

  ShardLayout() = default;
  // align: the shard size is a multiple of it (compressed collectives keep groups inside shards).
  ShardLayout(int64_t numel, int ranks, int64_t align = 1);
  // Rank r's slice [r*S, (r+1)*S) of the padded range.
  Range shard_range(int r) const { return {r * shard, (r + 1) * shard}; }
  // The part of rank r's slice that holds real elements (may be empty for the last ranks).
  Range valid_range(int r) const { return intersect(shard_range(r), {0, numel}); }
};

// The part of tensor `tensor` (index into ParamTable::tensors()) inside a dense range.
struct TensorSlice {
  int tensor = 0;
  Range dense;  // global element offsets
};
// Tensors intersecting `dense`, in table order (used for AdamW decay flags and checkpoint slices).
std::vector<TensorSlice> intersect_tensors(const ParamTable& table, Range dense);

class Partition {
 public:
  struct Segment {
    int unit_begin = 0, unit_end = 0;  // units [unit_begin, unit_end)
    Range dense;                       // element range in the table
    int64_t padded_begin = 0;          // offset in the padded layout
    int64_t local_begin = 0;           // offset of this rank's slice in the local layout
    ShardLayout layout;
  };
  // unit_ranges: consecutive [begin, end) unit ranges covering every unit in order.
  Partition(const ParamTable& table, const std::vector<std::pair<int, int>>& unit_ranges, int ranks, int rank,
            int64_t align = 1);

  const std::vector<Segment>& segments() const { return segments_; }
  int segment_of_unit(int unit) const { return unit_segment_[size_t(unit)]; }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int64_t dense_total() const { return dense_total_; }
  int64_t padded_total() const { return padded_total_; }
  int64_t local_total() const { return local_total_; }
  // Padded offset of a dense offset.
  int64_t padded_offset(int64_t dense) const;
  int64_t unit_padded_begin(int unit) const;

  // Layout conversions (padding zero-filled). dense: [dense_total], padded: [padded_total],
  // local: [local_total].
  void dense_to_padded(const float* dense, float* padded) const;
  void padded_to_dense(const float* padded, float* dense) const;
  // Rank `rank`'s slices of a dense buffer (padding zero-filled), and back into a dense buffer.
  void dense_to_local(const float* dense, float* local) const;
  void local_to_dense(const float* local, float* dense, int rank) const;

  // A run of this rank's local elements lying in one tensor: for per-range AdamW decay.
  struct LocalSlice {
    int tensor = 0;
    int64_t local_begin = 0, size = 0;
    int64_t padded_begin = 0;
  };
  const std::vector<LocalSlice>& local_slices() const { return local_slices_; }
  // The dense ranges this rank keeps, in order (a one-rank partition: the whole buffer).
  std::vector<Range> local_dense_ranges() const;

 private:
  const ParamTable* table_;
  int ranks_, rank_;
  std::vector<Segment> segments_;
  std::vector<int> unit_segment_;
  std::vector<LocalSlice> local_slices_;
  int64_t dense_total_ = 0, padded_total_ = 0, local_total_ = 0;
};

}  // namespace odyssey
