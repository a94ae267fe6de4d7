// Activations::bytes_for (the trainer's memory check) against what allocate() actually holds, for
// shapes that differ in every dimension the formula uses, with a qkv buffer per layer or one shared.
#include <gtest/gtest.h>
#include <vector>

#include "odyssey/model/gpt2.h"

namespace odyssey {
namespace {

TEST(Activations, BytesForMatchesAllocate) {
  struct Shape {
    int n_layer, n_head, d_model, vocab, B, T;
  };
  for (const Shape& s : {Shape{1, 1, 8, 11, 1, 1}, Shape{2, 5, 40, 67, 3, 37}, Shape{4, 4, 256, 256, 1, 4096},
                         Shape{3, 12, 96, 1000, 2, 129}}) {
    ModelConfig c;
    c.n_layer = s.n_layer, c.n_head = s.n_head, c.d_model = s.d_model, c.vocab_size = s.vocab;
    c.seq_len = s.T;
    // The whole model, a first stage (embeddings, no head), a last one (head, no embeddings) and,
    // with 3 layers, a middle one.
    std::vector<StageRange> ranges = {{0, c.n_layer}, {0, 1}};
    if (c.n_layer > 1) ranges.push_back({1, c.n_layer});
    if (c.n_layer > 2) ranges.push_back({1, 2});
    for (const StageRange& range : ranges)
      for (int head_chunk : {0, 1, 64, 100000})
        for (CheckpointPolicy policy :
             {CheckpointPolicy::none, CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
          const MemoryOptions memory{policy, head_chunk};
          Activations a;
          a.allocate(c, range, s.B, s.T, false, memory);
          EXPECT_EQ(Activations::bytes_for(c, range, s.B, s.T, false, memory), a.bytes())
              << s.n_layer << " layers, " << s.n_head << " heads, d " << s.d_model << ", B " << s.B << ", T "
              << s.T << ", layers [" << range.layer_begin << ", " << range.layer_end << "), head chunk "
              << head_chunk << ", checkpoint " << enum_name(kCheckpointPolicyNames, policy);
        }
  }
}

}  // namespace
}  // namespace odyssey
