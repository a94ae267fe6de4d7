// Partition::local_dense_ranges: over all ranks, the ranges each rank keeps tile the buffer exactly
// (no gap, no overlap), for rank counts that divide no segment and for padded shard alignment.
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

}  // namespace
}  // namespace odyssey
