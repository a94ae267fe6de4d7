// Partition::local_dense_ranges: over all ranks, the ranges each rank keeps tile the buffer exactly
// (no gap, no overlap), for rank counts that divide no segment and for padded shard alignment.
// intersect_tensors (which bisects the table) gives what a walk over every tensor gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/shard.h"

namespace odyssey {
namespace {

TEST(Partition, LocalDenseRangesTileTheBuffer) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 5, c.d_model = 35, c.seq_len = 38, c.vocab_size = 67;
  const ParamTable table(c);
  for (int64_t bucket_bytes : {int64_t(0), int64_t(30000)})
    for (int ranks : {1, 2, 3, 4, 7})
      for (int64_t align : {int64_t(1), int64_t(32)}) {
        std::vector<Range> all;
        for (int r = 0; r < ranks; ++r) {
          const Partition part(table, build_buckets(table, bucket_bytes), ranks, r, align);
          for (const Range& range : part.local_dense_ranges()) all.push_back(range);
        }
        std::sort(all.begin(), all.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
        int64_t at = 0;
        for (const Range& range : all) {
          ASSERT_EQ(range.begin, at) << ranks << " ranks, align " << align;
          ASSERT_GT(range.end, range.begin);
          at = range.end;
        }
        EXPECT_EQ(at, table.total()) << ranks << " ranks, align " << align;
      }
}

// Every tensor a range overlaps, by a walk over the whole table.
std::vector<TensorSlice> overlapping_tensors(const ParamTable& table, Range dense) {
  std::vector<TensorSlice> out;
  for (size_t i = 0; i < table.tensors().size(); ++i) {
    const ParamInfo& t = table.tensors()[i];
    const Range r = intersect(dense, {t.offset, t.offset + t.numel});
    if (!r.empty()) out.push_back({int(i), r});
  }
  return out;
}

TEST(Partition, IntersectTensorsFindsEveryTensorARangeOverlaps) {
  ModelConfig c;
  c.n_layer = 3, c.n_head = 4, c.d_model = 32, c.seq_len = 16, c.vocab_size = 67;
  const ParamTable whole(c);
  // Ranges starting and ending at every tensor boundary, one element either side, and past the ends.
  for (const ParamTable& table : {whole, whole.tensor_parallel(2, 1)}) {
    std::vector<int64_t> edges = {-1, table.total() + 1};
    for (const ParamInfo& t : table.tensors())
      for (int64_t d : {int64_t(-1), int64_t(0), int64_t(1)}) edges.push_back(t.offset + d);
    for (int64_t begin : edges)
      for (int64_t end : edges) {
        const Range dense{begin, end};
        const std::vector<TensorSlice> got = intersect_tensors(table, dense);
        const std::vector<TensorSlice> want = overlapping_tensors(table, dense);
        ASSERT_EQ(got.size(), want.size()) << "[" << begin << ", " << end << ")";
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].tensor, want[i].tensor) << "[" << begin << ", " << end << ")";
          EXPECT_EQ(got[i].dense.begin, want[i].dense.begin);
          EXPECT_EQ(got[i].dense.end, want[i].dense.end);
        }
      }
  }
}

}  // namespace
}  // namespace odyssey
