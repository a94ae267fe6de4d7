#include "odyssey/parallel/shard.h"

#include <algorithm>
#include <cstring>

#include "odyssey/core/error.h"

namespace odyssey {

ShardLayout::ShardLayout(int64_t n, int P, int64_t align) : numel(n), ranks(P) {
  ODY_CHECK(n >= 0 && P >= 1 && align >= 1, "shard layout: {} elements over {} ranks (align {})", n, P,
            align);
  shard = ((n + P - 1) / P + align - 1) / align * align;
  padded = shard * P;
}

std::vector<TensorSlice> intersect_tensors(const ParamTable& table, Range dense) {
  std::vector<TensorSlice> out;
  const auto& tensors = table.tensors();
  // Tensors lie in buffer order, back to back: the first one ending past dense.begin is found by
  // bisection and the walk stops at dense.end, so a Partition of one segment per unit (ZeRO-3, or
  // parallel.bucket_mb near 0) costs units x log(tensors), not units x tensors.
  auto it = std::partition_point(tensors.begin(), tensors.end(),
                                 [&](const ParamInfo& t) { return t.offset + t.numel <= dense.begin; });
  for (; it != tensors.end() && it->offset < dense.end; ++it) {
    Range r = intersect(dense, {it->offset, it->offset + it->numel});
    if (!r.empty()) out.push_back({int(it - tensors.begin()), r});
  }
  return out;
}

Partition::Partition(const ParamTable& table, const std::vector<std::pair<int, int>>& unit_ranges, int ranks,
                     int rank, int64_t align)
    : table_(&table), ranks_(ranks), rank_(rank) {
  ODY_CHECK(rank >= 0 && rank < ranks, "partition: rank {} of {}", rank, ranks);
  unit_segment_.assign(size_t(table.num_units()), -1);
  int next_unit = 0;
  for (auto [ub, ue] : unit_ranges) {
    ODY_CHECK(ub == next_unit && ue > ub && ue <= table.num_units(),
              "partition: unit ranges must cover units 0..{} in order (got [{}, {}))", table.num_units() - 1,
              ub, ue);
    next_unit = ue;
    Segment s;
    s.unit_begin = ub;
    s.unit_end = ue;
    s.dense = {table.unit_begin(ub), table.unit_end(ue - 1)};
    s.layout = ShardLayout(s.dense.size(), ranks, align);
    s.padded_begin = padded_total_;
    s.local_begin = local_total_;
    padded_total_ += s.layout.padded;
    local_total_ += s.layout.shard;
    for (int u = ub; u < ue; ++u) unit_segment_[size_t(u)] = int(segments_.size());
    segments_.push_back(s);
  }
  ODY_CHECK(next_unit == table.num_units(), "partition: units {}.. are not covered", next_unit);
  dense_total_ = table.total();

  // Runs of local elements per tensor: rank's valid slice of each segment cut at tensor boundaries.
  for (const Segment& s : segments_) {
    Range valid = s.layout.valid_range(rank);
    Range dense{s.dense.begin + valid.begin, s.dense.begin + valid.end};
    for (const TensorSlice& t : intersect_tensors(table, dense)) {
      int64_t in_seg = t.dense.begin - s.dense.begin;  // offset inside the segment
      local_slices_.push_back(
          {t.tensor, s.local_begin + (in_seg - valid.begin), t.dense.size(), s.padded_begin + in_seg});
    }
  }
}

int64_t Partition::padded_offset(int64_t dense) const {
  // Segments are few (units or buckets); a binary search keeps this cheap anyway.
  auto it = std::upper_bound(segments_.begin(), segments_.end(), dense,
                             [](int64_t d, const Segment& s) { return d < s.dense.end; });
  ODY_CHECK(it != segments_.end() && dense >= it->dense.begin, "offset {} outside the parameter buffer",
            dense);
  return it->padded_begin + (dense - it->dense.begin);
}

int64_t Partition::unit_padded_begin(int unit) const {
  return padded_offset(table_->unit_begin(unit));
}

void Partition::dense_to_padded(const float* dense, float* padded) const {
  for (const Segment& s : segments_) {
    float* dst = padded + s.padded_begin;
    std::memcpy(dst, dense + s.dense.begin, size_t(s.dense.size()) * sizeof(float));
    std::memset(dst + s.dense.size(), 0, size_t(s.layout.padded - s.dense.size()) * sizeof(float));
  }
}

void Partition::padded_to_dense(const float* padded, float* dense) const {
  for (const Segment& s : segments_)
    std::memcpy(dense + s.dense.begin, padded + s.padded_begin, size_t(s.dense.size()) * sizeof(float));
}

void Partition::dense_to_local(const float* dense, float* local) const {
  for (const Segment& s : segments_) {
    Range valid = s.layout.valid_range(rank_);
    float* dst = local + s.local_begin;
    std::memcpy(dst, dense + s.dense.begin + valid.begin, size_t(valid.size()) * sizeof(float));
    std::memset(dst + valid.size(), 0, size_t(s.layout.shard - valid.size()) * sizeof(float));
  }
}

void Partition::local_to_dense(const float* local, float* dense, int rank) const {
  for (const Segment& s : segments_) {
    Range valid = s.layout.valid_range(rank);
    std::memcpy(dense + s.dense.begin + valid.begin, local + s.local_begin,
                size_t(valid.size()) * sizeof(float));
  }
}

std::vector<Range> Partition::local_dense_ranges() const {
  std::vector<Range> out;
  for (const Segment& s : segments_) {
    const Range valid = s.layout.valid_range(rank_);
    if (valid.empty()) continue;
    const Range r{s.dense.begin + valid.begin, s.dense.begin + valid.end};
    if (!out.empty() && out.back().end == r.begin)
      out.back().end = r.end;  // adjacent segments
    else
      out.push_back(r);
  }
  return out;
}

}  // namespace odyssey
