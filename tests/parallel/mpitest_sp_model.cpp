// GPT-2 with sequence-parallel attention installed and its inputs sliced by shard_positions, as
// the trainer will run it: for every (sp_ulysses, sp_ring, layout) of the world (np 1, 2, 4) the
// token losses summed over the SP group equal the single-process loss (relative 1e-5), and the
// parameter gradients summed over the SP group equal the single-process gradients: per tensor,
// |g - g_ref| / |g_ref| <= 1e-5 (2-norms; measured <= 4.4e-6) and the largest element difference
// <= 2e-5 of the tensor's largest gradient (measured <= 1.0e-5: the q/k weights are scaled up so
// attention is sharp, which amplifies fp32 summation-order differences in a few elements).
// Tiny odd model: 2 layers, head size 24, 4 or 5 heads, batch 3, 67-token vocabulary, some
// targets ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/parallel/usp_attention.h"
#include "sp_test_util.h"

namespace odyssey {
namespace {

constexpr int B = 3, T = 152;

ModelConfig tiny(int n_head) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = n_head;
  c.d_model = 24 * n_head;
  c.seq_len = T;
  c.vocab_size = 67;
  return c;
}

using sp_test::Batch;

Batch batch(const ModelConfig& c) {
  return sp_test::random_batch(B, T, c.vocab_size, 5, 7, 3);  // some tokens not counted
}

void init(GPT2& m) {
  init_parameters(m.params(), m.table(), m.config(), 42);
  // Larger q/k weights than GPT-2's 0.02, so attention is far from uniform and layouts differ.
  for (int l = 0; l < m.config().n_layer; ++l) {
    const ParamInfo& w = *m.names().layer(l).qkv_w;
    for (int64_t i = 0; i < w.numel; ++i) m.param(w)[i] *= 10.0f;
  }
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

Result single_process(const ModelConfig& c) {
  GPT2 m(c);
  init(m);
  const Batch b = batch(c);
  m.zero_grads();
  int64_t n = 0;
  Result r;
  r.loss = m.forward_backward(b.inputs.data(), b.targets.data(), nullptr, B, T, 1.0f / float(b.count), &n);
  r.grads.assign(m.grads(), m.grads() + m.num_params());
  return r;
}

void expect_layout_matches(const ModelConfig& c, const sp_test::Layout& l, const Result& want) {
  SCOPED_TRACE(fmt::format("{} n_head={}", l.name(), c.n_head));
  ProcessGrid grid(world(), {.sp_ulysses = l.U, .sp_ring = l.R});
  SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring(), {l.layout});
  GPT2 m(c);
  init(m);
  m.set_attention(&op);
  const Batch b = batch(c);
  // Slice tokens, targets (already shifted: target i is token i + 1 of the data) and positions alike.
  const std::vector<int> pos = shard_positions(T, op.shard());
  const int Tl = int(pos.size());
  std::vector<int> inputs(size_t(B) * Tl), targets(size_t(B) * Tl);
  shard_rows(inputs.data(), b.inputs.data(), B, T, pos);
  shard_rows(targets.data(), b.targets.data(), B, T, pos);

  m.zero_grads();
  int64_t n = 0;
  const double loss =
      m.forward_backward(inputs.data(), targets.data(), pos.data(), B, Tl, 1.0f / float(b.count), &n);
  // Sum the partial losses over the SP group (gathered, summed in double).
  Communicator& sp = grid.sp();
  std::vector<float> parts(size_t(sp.size()));
  const float mine = float(loss);
  sp.all_gather(&mine, parts.data(), 1, DType::f32);
  double total = 0;
  for (float p : parts) total += p;
  int32_t count = int32_t(n);
  sp.all_reduce(&count, 1, DType::i32);
  EXPECT_EQ(count, b.count);
  EXPECT_NEAR(total, want.loss, 1e-5 * std::abs(want.loss));
  // The memory check's estimate is what forward and backward actually hold, SP buffers included;
  // a forward at another shape (evaluation) keeps no stale Ulysses tensors.
  const size_t held = m.activation_bytes();
  EXPECT_EQ(held, m.activation_bytes_for(B, Tl));
  EXPECT_GT(held, BlockActivations::bytes_for(gpt2_block(), c, m.range(), B, Tl));
  if (l.U > 1 && l.R == 1) {
    // The saved Ulysses tensors live in the layers' activations: a smaller batch holds exactly its own.
    const int H = c.n_head, D = c.d_model / c.n_head;
    const size_t saved = op.bytes_for(1, Tl / 2, H, D, c.n_layer) - op.bytes_for(1, Tl / 2, H, D, 0);
    m.forward(inputs.data(), targets.data(), pos.data(), 1, Tl / 2, &n);
    EXPECT_EQ(m.activation_bytes() - m.attention_bytes(),
              BlockActivations::bytes_for(gpt2_block(), c, m.range(), 1, Tl / 2, true) + saved)
        << "stale Ulysses tensors after a smaller batch";
  }

  // Weights are replicated over SP: their gradients are the sum over the group.
  sp.all_reduce(m.grads(), size_t(m.num_params()), DType::f32);
  double worst_norm = 0, worst_max = 0;
  for (const ParamInfo& t : m.table().tensors()) {
    double err = 0, scale = 0, e2 = 0, s2 = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double g = want.grads[size_t(i)], d = std::abs(double(m.grads()[i]) - g);
      err = std::max(err, d), scale = std::max(scale, std::abs(g));
      e2 += d * d, s2 += g * g;
    }
    const double norm_rel = std::sqrt(e2 / std::max(s2, 1e-60)), max_rel = err / std::max(scale, 1e-30);
    EXPECT_LE(norm_rel, 1e-5) << t.name;
    EXPECT_LE(max_rel, 2e-5) << t.name;
    worst_norm = std::max(worst_norm, norm_rel), worst_max = std::max(worst_max, max_rel);
  }
  if (world().rank() == 0)
    std::printf("  %-18s n_head=%d  loss %.6f (rel diff %.1e)  grads: |dg|/|g| %.1e, max|dg|/max|g| %.1e\n",
                l.name().c_str(), c.n_head, total / double(b.count), std::abs(total / want.loss - 1),
                worst_norm, worst_max);
}

TEST(SpModel, GPT2LossAndGradientsMatchSingleProcess) {
  const ModelConfig c4 = tiny(4), c5 = tiny(5);
  const Result want4 = single_process(c4), want5 = single_process(c5);
  for (const sp_test::Layout& l : sp_test::layouts(world().size())) {
    if (4 % l.U == 0) expect_layout_matches(c4, l, want4);  // (U = 8 when run by hand on 8 ranks)
    if (l.U == 1) expect_layout_matches(c5, l, want5);      // 5 heads: ring only
  }
}

}  // namespace
}  // namespace odyssey
