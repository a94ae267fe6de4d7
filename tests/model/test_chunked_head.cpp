// The fused, chunked LM head + cross-entropy (long-context-memory.md §4.4) against the head run as one
// chunk: the same loss (relative 1e-6) and gradients (per tensor, |Δ| / |g| <= 1e-5) for chunks that
// do not divide the tokens, with ignored targets and a chunk whose targets are all ignored; a chunk
// covering every token is bitwise the one-chunk head; repeated runs are bitwise equal. The logits
// block's padded rows against dense ones.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../kernels/reference.h"
#include "odyssey/core/error.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/lm_head.h"

namespace odyssey {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 5, c.d_model = 35, c.seq_len = 40, c.vocab_size = 67;  // V odd
  return c;
}

constexpr int kB = 2, kT = 37, kN = kB * kT;

struct HeadResult {
  double loss;
  int64_t count;
  std::vector<float> grads;
};

// One forward, loss and backward with the LM head in chunks of head_chunk tokens. Targets of rows
// 20..35 are ignored (-1), so with a chunk of 16 tokens one chunk counts nothing.
HeadResult run(int head_chunk) {
  GPT2 model(tiny());
  init_parameters(model.params(), model.table(), model.config(), 7);
  model.set_memory(MemoryOptions{CheckpointPolicy::none, head_chunk});
  std::vector<int> in(kN), tg(kN);
  for (int i = 0; i < kN; ++i) {
    in[size_t(i)] = (i * 31 + 5) % 67;
    tg[size_t(i)] = i >= 20 && i < 36 ? -1 : (i * 17 + 3) % 67;
  }
  HeadResult r;
  model.zero_grads();
  r.loss = model.forward_backward(in.data(), tg.data(), nullptr, kB, kT, 1.0f / kN, &r.count);
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  return r;
}

TEST(ChunkedHead, MatchesTheOneChunkHead) {
  const HeadResult whole = run(0);
  EXPECT_EQ(whole.count, kN - 16);
  const ParamTable table(tiny());
  for (int chunk : {1, 7, 16, 50, kN - 1}) {
    const HeadResult r = run(chunk);
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
  const HeadResult whole = run(0), covering = run(kN), larger = run(4096);
  EXPECT_EQ(covering.loss, whole.loss);
  EXPECT_EQ(covering.grads, whole.grads);
  EXPECT_EQ(larger.grads, whole.grads);
}

TEST(ChunkedHead, RepeatedRunsAreBitwiseEqual) {
  const HeadResult a = run(16), b = run(16);
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
  EXPECT_NE(model.logits(*acts).data, nullptr);
  EXPECT_THROW(model.backward(*acts), Error);  // an evaluation loss prepares no gradient
  model.set_memory(MemoryOptions{CheckpointPolicy::none, 16});
  model.forward(*acts, in.data(), tg.data(), nullptr, kB, kT);
  model.loss(*acts, 0.0f, nullptr);
  EXPECT_EQ(model.logits(*acts).data, nullptr);
  EXPECT_THROW(model.set_memory(MemoryOptions{CheckpointPolicy::none, -1}), Error);
}

// The head with its logits rows padded (logits_row_stride, what the models run) against dense rows
// (block_ld = V: the reference layout) at GPT-2's odd vocabulary: the GEMMs may block otherwise, so
// within rounding (loss relative 1e-6, gradients |Δ| / |g| <= 1e-5); the padding is never written.
TEST(ChunkedHead, PaddedLogitsRowsMatchDenseRows) {
  constexpr int N = 24, C = 32, V = 50257;
  const std::vector<float> x = test::random_floats(size_t(N) * C, 1),
                           w = test::random_floats(size_t(V) * C, 2, -0.2f, 0.2f),
                           gamma = test::random_floats(C, 3), beta = test::random_floats(C, 4, -0.1f, 0.1f);
  std::vector<int> targets(N);
  for (int i = 0; i < N; ++i) targets[size_t(i)] = i == 5 ? -1 : (i * 7919 + 13) % V;

  struct Out {
    std::vector<float> losses, dx, dw, dgamma, dbeta, block;
  };
  auto run = [&](int64_t ld) {
    Out o{std::vector<float>(N),
          std::vector<float>(size_t(N) * C),
          std::vector<float>(size_t(V) * C),
          std::vector<float>(C),
          std::vector<float>(C),
          std::vector<float>(size_t(N) * size_t(ld), -3.0f)};
    std::vector<float> nx(size_t(N) * C), nn(size_t(N) * C), ndn(size_t(N) * C), mean(N), rstd(N);
    NormGradSums sums(2 * C);
    LmHeadArgs a;
    a.x = x.data();
    a.norm = FinalNorm{gamma.data(), beta.data(), 1e-5f,       &sums,      nx.data(),
                       nn.data(),    ndn.data(),  mean.data(), rstd.data()};
    a.w = w.data(), a.targets = targets.data(), a.losses = o.losses.data();
    a.block = o.block.data(), a.block_ld = ld;
    a.dx = o.dx.data(), a.dw = o.dw.data();
    a.N = N, a.C = C, a.V = V, a.chunk = N, a.dloss = 1.0f / N;
    lm_head_loss(a, local_linears(), local_vocab(), nullptr);
    sums.finish(o.dgamma.data(), o.dbeta.data());
    return o;
  };
  const int64_t padded = logits_row_stride(V);
  ASSERT_EQ(padded % 16, 0);
  ASSERT_GT(padded, V);
  const Out dense = run(V), got = run(padded);
  auto close = [](const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i)
      diff += (a[i] - b[i]) * double(a[i] - b[i]), norm += double(b[i]) * b[i];
    EXPECT_LE(std::sqrt(diff), tol * std::sqrt(norm) + 1e-12) << what;
  };
  close(got.losses, dense.losses, 1e-6, "losses");
  EXPECT_EQ(got.losses[5], 0.0f);
  close(got.dx, dense.dx, 1e-5, "dx");
  close(got.dw, dense.dw, 1e-5, "dW");
  close(got.dgamma, dense.dgamma, 1e-5, "d(norm weight)");
  close(got.dbeta, dense.dbeta, 1e-5, "d(norm bias)");
  for (int i = 0; i < N; ++i)
    for (int64_t v = V; v < padded; ++v) ASSERT_EQ(got.block[size_t(i * padded + v)], -3.0f) << "row " << i;
  EXPECT_THROW(run(V - 1), Error);  // a stride narrower than the vocabulary
}

}  // namespace
}  // namespace odyssey
