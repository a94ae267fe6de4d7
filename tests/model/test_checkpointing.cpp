// Activation checkpointing (memory.checkpoint = full): each layer keeps only its output and is
// recomputed in its backward with the forward's own calls, so the loss and every gradient are bitwise
// those of checkpoint = none, with the LM head chunked or not, over accumulated micro-batches of
// different lengths (T not a multiple of anything).
#include <gtest/gtest.h>

#include <vector>

#include "odyssey/model/gpt2.h"

namespace odyssey {
namespace {

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
  size_t activation_bytes = 0;
};

Result run(const MemoryOptions& memory) {
  ModelConfig c;
  c.n_layer = 3, c.n_head = 5, c.d_model = 35, c.seq_len = 40, c.vocab_size = 67;
  GPT2 model(c);
  init_parameters(model.params(), model.table(), c, 11);
  model.set_memory(memory);
  model.zero_grads();
  Result r;
  // Two micro-batches accumulated, of different shapes (the activations are re-sized in between).
  for (auto [B, T] : {std::pair{2, 37}, std::pair{3, 29}}) {
    std::vector<int> in(size_t(B * T)), tg(size_t(B * T));
    for (int i = 0; i < B * T; ++i) in[size_t(i)] = (i * 13 + T) % 67, tg[size_t(i)] = (i * 7 + B) % 67;
    int64_t n = 0;
    r.losses.push_back(model.forward_backward(in.data(), tg.data(), nullptr, B, T, 1.0f / 200, &n));
    r.activation_bytes = model.activation_bytes();
  }
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  return r;
}

TEST(Checkpointing, FullIsBitwiseNone) {
  for (int head_chunk : {0, 16}) {
    const Result none = run({CheckpointPolicy::none, head_chunk});
    const Result full = run({CheckpointPolicy::full, head_chunk});
    EXPECT_EQ(full.losses, none.losses) << "head chunk " << head_chunk;
    EXPECT_EQ(full.grads, none.grads) << "head chunk " << head_chunk;
    EXPECT_LT(full.activation_bytes, none.activation_bytes);
  }
}

}  // namespace
}  // namespace odyssey
