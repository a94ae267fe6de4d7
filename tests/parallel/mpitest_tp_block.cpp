// The GPT-2 block under tensor parallelism (tensor-pipeline-parallelism.md §1.2-§1.4, §1.7) against
// the single-process block: at tp = world size (1, 2, 4), plain TP and Megatron sequence parallelism,
// two blocks in a row (40 wide, 4 heads of 10, batch 3 x 12 tokens). Each rank slices the global
// tensors as §1.4 shards them: qkv by output rows in 3 sub-parameters (q, k, v each split by heads),
// the attention projection and fc_proj by input columns, fc by output rows; norms and row biases
// replicated. Under TP-SP the replicated tensors' gradients are partial sums over each rank's tokens,
// summed over tp here as the training step sums them. Tolerance 1e-5 relative (the row-parallel sums
// change the summation order); at tp 1 the tensor-parallel path is the local one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/model/gpt2_block.h"
#include "odyssey/parallel/tp_linear.h"
#include "odyssey/parallel/tp_ops.h"
#include "sp_test_util.h"

namespace odyssey {
namespace {

using Vec = std::vector<float>;

double rel_error(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return err / std::max(scale, 1e-30);
}

// One layer's twelve tensors, in the order of Gpt2LayerTensors.
struct Layer {
  Vec ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  std::vector<Vec*> all() {
    return {&ln1_w, &ln1_b, &qkv_w, &qkv_b, &attn_proj_w, &attn_proj_b,
            &ln2_w, &ln2_b, &fc_w,  &fc_b,  &fc_proj_w,   &fc_proj_b};
  }
  Gpt2LayerTensors tensors() {
    return {ln1_w.data(), ln1_b.data(), qkv_w.data(), qkv_b.data(), attn_proj_w.data(), attn_proj_b.data(),
            ln2_w.data(), ln2_b.data(), fc_w.data(),  fc_b.data(),  fc_proj_w.data(),   fc_proj_b.data()};
  }
  static Layer zeros_like(Layer& l) {
    Layer z;
    auto src = l.all(), dst = z.all();
    for (size_t i = 0; i < src.size(); ++i) dst[i]->assign(src[i]->size(), 0.0f);
    return z;
  }
};

Layer random_layer(int C, uint32_t seed) {
  Layer l;
  l.ln1_w = sp_test::uniform(C, seed + 1, 0.5f);
  for (float& x : l.ln1_w) x += 1.0f;
  l.ln1_b = sp_test::uniform(C, seed + 2, 0.1f);
  l.qkv_w = sp_test::uniform(3 * C * C, seed + 3, 0.3f);
  l.qkv_b = sp_test::uniform(3 * C, seed + 4, 0.1f);
  l.attn_proj_w = sp_test::uniform(C * C, seed + 5, 0.3f);
  l.attn_proj_b = sp_test::uniform(C, seed + 6, 0.1f);
  l.ln2_w = sp_test::uniform(C, seed + 7, 0.5f);
  for (float& x : l.ln2_w) x += 1.0f;
  l.ln2_b = sp_test::uniform(C, seed + 8, 0.1f);
  l.fc_w = sp_test::uniform(4 * C * C, seed + 9, 0.3f);
  l.fc_b = sp_test::uniform(4 * C, seed + 10, 0.1f);
  l.fc_proj_w = sp_test::uniform(C * 4 * C, seed + 11, 0.2f);
  l.fc_proj_b = sp_test::uniform(C, seed + 12, 0.1f);
  return l;
}

// Rows [r0, r0 + n) of [*, cols].
Vec rows_of(const Vec& m, int64_t r0, int64_t n, int64_t cols) {
  return Vec(m.begin() + r0 * cols, m.begin() + (r0 + n) * cols);
}
// Columns [c0, c0 + w) of [rows, cols].
Vec cols_of(const Vec& m, int64_t rows, int64_t cols, int64_t c0, int64_t w) {
  Vec out(size_t(rows * w));
  for (int64_t i = 0; i < rows; ++i) std::copy_n(m.begin() + i * cols + c0, w, out.begin() + i * w);
  return out;
}
// Rank r's rows of a tensor whose dim 0 holds `parts` sub-parameters of `part_rows` rows each
// ([q; k; v] of qkv: 3 sub-parameters of C rows), each split over t.
Vec sub_param_rows(const Vec& m, int parts, int64_t part_rows, int64_t cols, int t, int r) {
  Vec out;
  const int64_t w = part_rows / t;
  for (int s = 0; s < parts; ++s) {
    const Vec piece = rows_of(m, s * part_rows + r * w, w, cols);
    out.insert(out.end(), piece.begin(), piece.end());
  }
  return out;
}

// §1.4: this rank's shard of a global GPT-2 layer (weights [out, in]).
Layer shard(const Layer& g, int C, int t, int r) {
  Layer l = g;  // replicated: norms, attn_proj_b, fc_proj_b
  l.qkv_w = sub_param_rows(g.qkv_w, 3, C, C, t, r);
  l.qkv_b = sub_param_rows(g.qkv_b, 3, C, 1, t, r);
  l.attn_proj_w = cols_of(g.attn_proj_w, C, C, r * C / t, C / t);
  l.fc_w = rows_of(g.fc_w, r * 4 * C / t, 4 * C / t, C);
  l.fc_b = rows_of(g.fc_b, r * 4 * C / t, 4 * C / t, 1);
  l.fc_proj_w = cols_of(g.fc_proj_w, C, 4 * C, r * 4 * C / t, 4 * C / t);
  return l;
}

void check_blocks(bool sp) {
  Communicator& w = world();
  static ProcessGrid grid(w, {.tp = w.size()});
  Communicator& tp = grid.tp();
  const int t = tp.size(), r = tp.rank();
  ModelConfig cfg;
  cfg.n_layer = 2, cfg.n_head = 4, cfg.d_model = 40, cfg.seq_len = 12, cfg.vocab_size = 64;
  const BlockShape s{3, 12, cfg.d_model, cfg.n_head};
  const int C = s.C, N = s.N(), L = 2;
  std::vector<Layer> global = {random_layer(C, 100), random_layer(C, 200)};
  const Vec x = sp_test::uniform(size_t(N) * C, 7, 1.0f), dy = sp_test::uniform(size_t(N) * C, 8, 1.0f);

  // Runs L blocks over x with `lin`, returning the output and d(x), gradients into grads.
  auto run = [&](LinearOps& lin, std::vector<Layer>& layers, std::vector<Layer>& grads, const Vec& x_in,
                 const Vec& dy_in, Vec& out, Vec& dx) {
    LocalAttention attention;
    const TpSplit split = lin.split();
    std::vector<Gpt2LayerActs> acts(L);
    Gpt2BlockScratch scratch;
    scratch.allocate(cfg, s.B, s.T, false, true, split);
    for (auto& a : acts) a.allocate(cfg, s.B, s.T, true, split);
    const float* in = x_in.data();
    for (int l = 0; l < L; ++l) {
      gpt2_block_forward(acts[l], in, layers[l].tensors(), attention, lin, scratch, s);
      in = acts[l].residual3.data();
    }
    out.assign(in, in + x_in.size());
    dx = dy_in;
    for (int l = L - 1; l >= 0; --l)
      gpt2_block_backward(dx.data(), acts[l], l ? acts[l - 1].residual3.data() : x_in.data(),
                          layers[l].tensors(), grads[l].tensors(), attention, lin, scratch, s);
  };

  std::vector<Layer> ref_grads = {Layer::zeros_like(global[0]), Layer::zeros_like(global[1])};
  Vec ref_out, ref_dx;
  run(local_linears(), global, ref_grads, x, dy, ref_out, ref_dx);

  TensorParallelLinears lin(tp, sp);
  std::vector<Layer> local = {shard(global[0], C, t, r), shard(global[1], C, t, r)};
  std::vector<Layer> grads = {Layer::zeros_like(local[0]), Layer::zeros_like(local[1])};
  const int64_t rows = lin.rows(N), row0 = sp ? r * rows : 0;
  Vec out, dx;
  run(lin, local, grads, rows_of(x, row0, rows, C), rows_of(dy, row0, rows, C), out, dx);
  if (sp)  // the replicated tensors' partial gradients, summed over tp once (the step's job)
    for (Layer& g : grads)
      for (Vec* v : {&g.ln1_w, &g.ln1_b, &g.ln2_w, &g.ln2_b, &g.attn_proj_b, &g.fc_proj_b})
        tp_all_reduce(tp, v->data(), int64_t(v->size()));

  EXPECT_LT(rel_error(out, rows_of(ref_out, row0, rows, C)), 1e-5) << "output";
  EXPECT_LT(rel_error(dx, rows_of(ref_dx, row0, rows, C)), 1e-5) << "d input";
  const char* names[] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "attn_proj_w", "attn_proj_b",
                         "ln2_w", "ln2_b", "fc_w",  "fc_b",  "fc_proj_w",   "fc_proj_b"};
  for (int l = 0; l < L; ++l) {
    auto got = grads[l].all();
    Layer want_layer = shard(ref_grads[l], C, t, r);  // gradients shard as their parameters
    auto want = want_layer.all();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(rel_error(*got[i], *want[i]), 1e-5) << "layer " << l << " d" << names[i];
  }
}

TEST(TensorParallelBlock, Gpt2Plain) {
  check_blocks(false);
}
TEST(TensorParallelBlock, Gpt2SequenceParallel) {
  check_blocks(true);
}

}  // namespace
}  // namespace odyssey
