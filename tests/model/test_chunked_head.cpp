// The fused, chunked LM head + cross-entropy (long-context-memory.md §4.4) against the head run as one
// chunk: the same loss (relative 1e-6) and gradients (per tensor, |Δ| / |g| <= 1e-5) for chunks that
// do not divide the tokens, with ignored targets and a chunk whose targets are all ignored; a chunk
// covering every token is bitwise the one-chunk head; repeated runs are bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/model/gpt2.h"

namespace odyssey {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 5, c.d_model = 35, c.seq_len = 40, c.vocab_size = 67;  // V odd
  return c;
}

constexpr int kB = 2, kT = 37, kN = kB * kT;

struct Result {
  double loss;
  int64_t count;
  std::vector<float> grads;
};

// One forward, loss and backward with the LM head in chunks of head_chunk tokens. Targets of rows
// 20..35 are ignored (-1), so with a chunk of 16 tokens one chunk counts nothing.
Result run(int head_chunk) {
  GPT2 model(tiny());
  init_parameters(model.params(), model.table(), model.config(), 7);
  model.set_memory(MemoryOptions{CheckpointPolicy::none, head_chunk});
  std::vector<int> in(kN), tg(kN);
  for (int i = 0; i < kN; ++i) {
    in[size_t(i)] = (i * 31 + 5) % 67;
    tg[size_t(i)] = i >= 20 && i < 36 ? -1 : (i * 17 + 3) % 67;
  }
  Result r;
  model.zero_grads();
  r.loss = model.forward_backward(in.data(), tg.data(), nullptr, kB, kT, 1.0f / kN, &r.count);
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  return r;
}

TEST(ChunkedHead, MatchesTheOneChunkHead) {
  const Result whole = run(0);
  EXPECT_EQ(whole.count, kN - 16);
  const ParamTable table(tiny());
  for (int chunk : {1, 7, 16, 50, kN - 1}) {
    const Result r = run(chunk);
    EXPECT_EQ(r.count, whole.count);
    EXPECT_LE(std::abs(r.loss / whole.loss - 1), 1e-6) << "chunk " << chunk;
    for (const ParamInfo& t : table.tensors()) {
      double diff = 0, norm = 0;
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
        const double g = whole.grads[size_t(i)], d = r.grads[size_t(i)] - g;
        diff += d * d, norm += g * g;
      }
      EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-12) << t.name << ", chunk " << chunk;
    }
  }
}

TEST(ChunkedHead, AChunkCoveringEveryTokenIsTheOneChunkHead) {
  const Result whole = run(0), covering = run(kN), larger = run(4096);
  EXPECT_EQ(covering.loss, whole.loss);
  EXPECT_EQ(covering.grads, whole.grads);
  EXPECT_EQ(larger.grads, whole.grads);
}

TEST(ChunkedHead, RepeatedRunsAreBitwiseEqual) {
  const Result a = run(16), b = run(16);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);
}

TEST(ChunkedHead, LogitsOnlyWhenOneChunkAndBackwardNeedsATrainingLoss) {
  GPT2 model(tiny());
  init_parameters(model.params(), model.table(), model.config(), 7);
  std::vector<int> in(kN, 3), tg(kN, 4);
  auto acts = model.make_activations();
  model.forward(*acts, in.data(), tg.data(), nullptr, kB, kT);
  model.loss(*acts, 0.0f, nullptr);
  EXPECT_NE(model.logits(*acts), nullptr);
  EXPECT_THROW(model.backward(*acts), Error);  // an evaluation loss prepares no gradient
  model.set_memory(MemoryOptions{CheckpointPolicy::none, 16});
  model.forward(*acts, in.data(), tg.data(), nullptr, kB, kT);
  model.loss(*acts, 0.0f, nullptr);
  EXPECT_EQ(model.logits(*acts), nullptr);
  EXPECT_THROW(model.set_memory(MemoryOptions{CheckpointPolicy::none, -1}), Error);
}

}  // namespace
}  // namespace odyssey
