// The GPT-2 block under tensor parallelism (tensor-pipeline-parallelism.md §1.2-§1.4, §1.7) against
// the single-process block: at tp = world size (1, 2, 4), plain TP and Megatron sequence parallelism,
// two blocks in a row (40 wide, 4 heads of 10, batch 3 x 12 tokens). Each rank slices the global
// tensors as §1.4 shards them: qkv by output rows in 3 sub-parameters (q, k, v each split by heads),
// the attention projection and fc_proj by input columns, fc by output rows; norms and row biases
// replicated. Under TP-SP the replicated tensors' gradients are partial sums over each rank's tokens,
// summed over tp here as the training step sums them. Tolerance 1e-5 relative (the row-parallel sums
// change the summation order); at tp 1 the tensor-parallel path is the local one. The Llama blocks
// (36 wide, 4 heads of 10, MLP 52) add grouped-query attention split and replicated over tp (§1.8). The Llama
// blocks (36 wide, 4 heads of 10, MLP 52) add grouped-query attention split and replicated over tp (§1.8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/comm/comm_thread.h"
#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/kernels/rope.h"
#include "odyssey/model/block_runner.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/llama.h"
#include "odyssey/parallel/tp_linear.h"
#include "odyssey/parallel/tp_ops.h"
#include "sp_test_util.h"
#include "tp_test_util.h"

namespace odyssey {
namespace {

using tp_test::cols_of;
using tp_test::rel_error;
using tp_test::rows_of;
using Vec = tp_test::Vec;

// One layer's twelve tensors, in the order of BlockTensors.
struct Layer {
  Vec ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  std::vector<Vec*> all() {
    return {&ln1_w, &ln1_b, &qkv_w, &qkv_b, &attn_proj_w, &attn_proj_b,
            &ln2_w, &ln2_b, &fc_w,  &fc_b,  &fc_proj_w,   &fc_proj_b};
  }
  BlockTensors tensors() {
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

// This rank's residual rows of a [N, C] tensor: all of them, or under TP-SP the tokens its rows hold
// (tp_sp_token: a contiguous slice with one chunk, interleaved by chunk with several).
Vec my_rows(const Vec& m, bool sp, int64_t N, int C, int t, int r, int chunk) {
  if (!sp) return m;
  Vec out;
  for (int64_t k = 0; k < N / t; ++k) {
    const Vec row = rows_of(m, tp_sp_token(N, t, r, k, chunk), 1, C);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Domino (tensor-pipeline-parallelism.md §2): the blocks run over two halves of the rows (B rows of T
// tokens: with B even the halves are rows, with B = 1 tokens), their tp reductions on a communication
// thread, interleaved; query_chunks: plain TP's local attention per half (the trainer's layout).
struct DominoRun {
  bool on = false;
  int B = 3, T = 12;
  bool query_chunks = false;
};

// The domino run against the same blocks without Domino over the same two halves: at tp 2 bit for bit
// (a sum of two values does not depend on the order), at tp 4 within fp32 rounding (the collectives'
// summation order may differ); and the bytes of every collective kind the same as without halves.
void expect_same_as_undivided(const Vec& got, const Vec& want, const char* what) {
  if (world().size() == 2)
    EXPECT_EQ(got, want) << what;
  else
    EXPECT_LT(rel_error(got, want), 1e-6) << what;
}

// Bytes and calls per collective kind of `f` (this rank's, every group).
using Traffic = std::map<std::string, std::pair<uint64_t, uint64_t>>;
Traffic traffic(const std::function<void()>& f) {
  world().stats().reset();
  f();
  Traffic m;
  for (auto& [kind, c] : world().stats().to_json()["by_kind"].items())
    m[kind] = {c["bytes"].get<uint64_t>(), c["calls"].get<uint64_t>()};
  return m;
}

void expect_halves_traffic(const Traffic& halves, const Traffic& whole) {
  ASSERT_EQ(halves.size(), whole.size());
  for (auto& [kind, c] : whole) {
    EXPECT_EQ(halves.at(kind).first, c.first) << kind << " bytes";
    EXPECT_EQ(halves.at(kind).second, 2 * c.second) << kind << " calls";
  }
}

void check_blocks(bool sp, int chunk = 0, DominoRun domino = {}) {
  Communicator& w = world();
  static ProcessGrid grid(w, {.tp = w.size()});
  Communicator& tp = grid.tp();
  const int t = tp.size(), r = tp.rank();
  if (domino.on && t == 1) GTEST_SKIP() << "Domino needs tp > 1";
  ModelConfig cfg;
  cfg.n_layer = 2, cfg.n_head = 4, cfg.d_model = 40, cfg.seq_len = domino.T, cfg.vocab_size = 64;
  if (domino.on) chunk = domino.B * domino.T / (sp ? t : 1) / 2;  // the two halves of a rank's rows
  struct {
    int B, T, C, H, chunk;
    int N() const { return B * T; }
  } s{domino.B, domino.T, cfg.d_model, cfg.n_head, chunk};
  const int C = s.C, N = s.N(), L = 2;
  std::vector<Layer> global = {random_layer(C, 100), random_layer(C, 200)};
  const Vec x = sp_test::uniform(size_t(N) * C, 7, 1.0f), dy = sp_test::uniform(size_t(N) * C, 8, 1.0f);

  // Runs L blocks over x with `lin`, returning the output and d(x), gradients into grads.
  auto run = [&](LinearOps& lin, std::vector<Layer>& layers, std::vector<Layer>& grads, const Vec& x_in,
                 const Vec& dy_in, Vec& out, Vec& dx) {
    LocalAttention attention;
    const TpSplit split = lin.split();
    const BlockDims d = gpt2_block().dims(cfg, split);
    BlockShape run_shape{s.B, s.T, d, s.chunk};  // the K/V prefix of this run's heads
    if (domino.query_chunks) run_shape.query_chunks = {true, attention.kv_prefix(d.H, d.D)};
    std::vector<BlockActs> acts(L);
    BlockScratch scratch;
    scratch.allocate(d, s.B, s.T, false, true, s.chunk, split, run_shape.query_chunks);
    for (auto& a : acts) a.allocate(gpt2_block(), d, s.B, s.T, true, {}, split);
    const BlockCall call{gpt2_block(), attention, lin, scratch, run_shape};
    const float* in = x_in.data();
    for (int l = 0; l < L; ++l) {
      block_forward(call, acts[l], in, layers[l].tensors());
      in = acts[l].residual3.data();
    }
    out.assign(in, in + x_in.size());
    dx = dy_in;
    for (int l = L - 1; l >= 0; --l)
      block_backward(call, dx.data(), acts[l], l ? acts[l - 1].residual3.data() : x_in.data(),
                     layers[l].tensors(), grads[l].tensors());
  };

  std::vector<Layer> ref_grads = {Layer::zeros_like(global[0]), Layer::zeros_like(global[1])};
  Vec ref_out, ref_dx;
  run(local_linears(), global, ref_grads, x, dy, ref_out, ref_dx);

  std::unique_ptr<CommThread> thread;
  if (domino.on) thread = std::make_unique<CommThread>(tp.split(0, r, "tp", tp.intra_node()));
  TensorParallelLinears lin(tp, sp, thread.get());
  std::vector<Layer> local = {shard(global[0], C, t, r), shard(global[1], C, t, r)};
  auto mine = [&](const Vec& m) { return my_rows(m, sp, N, C, t, r, chunk); };
  // The tp run (its traffic in *seen); under TP-SP the replicated tensors' partial gradients summed
  // over tp once (the step's job).
  auto run_tp = [&](LinearOps& ops, std::vector<Layer>& grads, Vec& out, Vec& dx, Traffic* seen) {
    grads = {Layer::zeros_like(local[0]), Layer::zeros_like(local[1])};
    const Traffic t_run = traffic([&] { run(ops, local, grads, mine(x), mine(dy), out, dx); });
    if (seen) *seen = t_run;
    if (sp)
      for (Layer& g : grads)
        for (Vec* v : {&g.ln1_w, &g.ln1_b, &g.ln2_w, &g.ln2_b, &g.attn_proj_b, &g.fc_proj_b})
          tp_all_reduce(tp, v->data(), int64_t(v->size()));
  };
  std::vector<Layer> grads;
  Vec out, dx;
  Traffic halves;
  run_tp(lin, grads, out, dx, &halves);
  if (domino.on) {
    EXPECT_GT(thread->take_times().comm_seconds, 0.0) << "the reductions ran on the thread";
    TensorParallelLinears in_order(tp, sp);  // the same halves, one after the other
    std::vector<Layer> want_grads;
    Vec want_out, want_dx;
    run_tp(in_order, want_grads, want_out, want_dx, nullptr);
    expect_same_as_undivided(out, want_out, "output");
    expect_same_as_undivided(dx, want_dx, "d input");
    for (int l = 0; l < L; ++l) {
      auto got = grads[l].all(), want = want_grads[l].all();
      for (size_t i = 0; i < got.size(); ++i) expect_same_as_undivided(*got[i], *want[i], "gradient");
    }
    if (!domino.query_chunks) {  // without halves: the same bytes in half the calls
      auto whole = s;
      whole.chunk = 0;
      std::swap(s, whole);
      auto m = [&](const Vec& v) { return my_rows(v, sp, N, C, t, r, 0); };
      std::vector<Layer> g = {Layer::zeros_like(local[0]), Layer::zeros_like(local[1])};
      Vec o, d;
      const auto undivided = traffic([&] { run(in_order, local, g, m(x), m(dy), o, d); });
      std::swap(s, whole);
      expect_halves_traffic(halves, undivided);
    }
  }

  EXPECT_LT(rel_error(out, mine(ref_out)), 1e-5) << "output";
  EXPECT_LT(rel_error(dx, mine(ref_dx)), 1e-5) << "d input";
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
// Plain TP composes with sequence-chunked layers (chunks of 10 of the 36 rows: the last is short).
TEST(TensorParallelBlock, Gpt2PlainChunked) {
  check_blocks(false, 10);
}
// Domino: rows (2 rows of 12) and tokens (1 row of 16), plain TP (whole and per-half attention) and TP-SP.
TEST(TensorParallelBlock, Gpt2DominoRows) {
  check_blocks(false, 0, {true, 2, 12});
  check_blocks(false, 0, {true, 2, 12, true});
  check_blocks(true, 0, {true, 2, 12});
}
TEST(TensorParallelBlock, Gpt2DominoTokens) {
  check_blocks(false, 0, {true, 1, 16, true});
  check_blocks(true, 0, {true, 1, 16});
}

// A Llama layer: attn_norm [C]; qkv = q [H D, C], k, v [K D, C] adjacent; o [C, H D]; mlp_norm [C];
// gate_up = gate [F, C], up [F, C] adjacent; down [C, F].
struct LlamaLayer {
  Vec attn_norm, qkv_w, o_w, mlp_norm, gate_up_w, down_w;
  std::vector<Vec*> all() { return {&attn_norm, &qkv_w, &o_w, &mlp_norm, &gate_up_w, &down_w}; }
  BlockTensors tensors() {
    BlockTensors t;
    t.norm1_w = attn_norm.data(), t.qkv_w = qkv_w.data(), t.proj_w = o_w.data(), t.norm2_w = mlp_norm.data();
    t.up_w = gate_up_w.data(), t.down_w = down_w.data();
    return t;
  }
  LlamaLayer zeros() {
    LlamaLayer z = *this;
    for (Vec* v : z.all()) std::fill(v->begin(), v->end(), 0.0f);
    return z;
  }
};

struct LlamaDims {
  int C, H, K, D, F;
};

LlamaLayer random_llama_layer(const LlamaDims& d, uint32_t seed) {
  LlamaLayer l;
  l.attn_norm = sp_test::uniform(d.C, seed + 1, 0.5f);
  for (float& x : l.attn_norm) x += 1.0f;
  l.qkv_w = sp_test::uniform(size_t(d.H + 2 * d.K) * d.D * d.C, seed + 2, 0.3f);
  l.o_w = sp_test::uniform(size_t(d.C) * d.H * d.D, seed + 3, 0.3f);
  l.mlp_norm = sp_test::uniform(d.C, seed + 4, 0.5f);
  for (float& x : l.mlp_norm) x += 1.0f;
  l.gate_up_w = sp_test::uniform(size_t(2) * d.F * d.C, seed + 5, 0.3f);
  l.down_w = sp_test::uniform(size_t(d.C) * d.F, seed + 6, 0.2f);
  return l;
}

// §1.4 and §1.8: q by heads; k and v by heads when tp divides K, else rank r holds key/value head
// r / (t / K); o by input columns; gate and up (2 sub-parameters) by rows; down by input columns.
LlamaLayer shard(const LlamaLayer& g, const LlamaDims& d, int t, int r) {
  LlamaLayer l = g;
  const int64_t qh = d.H / t, kh = d.K % t == 0 ? d.K / t : 1, k0 = d.K % t == 0 ? r * kh : r / (t / d.K);
  l.qkv_w = rows_of(g.qkv_w, r * qh * d.D, qh * d.D, d.C);
  for (int s = 0; s < 2; ++s) {  // k, then v
    const Vec kv = rows_of(g.qkv_w, (d.H + s * d.K + k0) * d.D, kh * d.D, d.C);
    l.qkv_w.insert(l.qkv_w.end(), kv.begin(), kv.end());
  }
  l.o_w = cols_of(g.o_w, d.C, d.H * d.D, r * qh * d.D, qh * d.D);
  l.gate_up_w = sub_param_rows(g.gate_up_w, 2, d.F, d.C, t, r);
  l.down_w = cols_of(g.down_w, d.C, d.F, r * d.F / t, d.F / t);
  return l;
}

void check_llama_blocks(bool sp, int K, int chunk = 0, DominoRun domino = {}) {
  Communicator& w = world();
  static ProcessGrid grid(w, {.tp = w.size()});
  Communicator& tp = grid.tp();
  const int t = tp.size(), r = tp.rank();
  if (domino.on && t == 1) GTEST_SKIP() << "Domino needs tp > 1";
  ModelConfig cfg;
  cfg.arch = Arch::llama, cfg.n_layer = 2, cfg.n_head = 4, cfg.n_kv_head = K, cfg.d_model = 36,
  cfg.head_size = 10;
  cfg.d_ff = 52, cfg.seq_len = domino.T, cfg.vocab_size = 64;
  const LlamaDims d{36, 4, K, 10, 52};
  const int B = domino.B, T = domino.T, N = B * T, C = d.C, L = 2;
  if (domino.on) chunk = N / (sp ? t : 1) / 2;  // the two halves of a rank's rows
  std::vector<LlamaLayer> global = {random_llama_layer(d, 300), random_llama_layer(d, 400)};
  const Vec x = sp_test::uniform(size_t(N) * C, 9, 1.0f), dy = sp_test::uniform(size_t(N) * C, 10, 1.0f);
  std::vector<int> positions(N);
  for (int n = 0; n < N; ++n) positions[n] = n % T;
  const std::vector<float> inv_freq = rope_inv_freq(d.D, 10000.0, {});
  Vec cos(size_t(N) * d.D / 2), sin(cos.size());
  rope_tables(cos.data(), sin.data(), positions.data(), N, inv_freq.data(), d.D);

  auto run = [&](LinearOps& lin, std::vector<LlamaLayer>& layers, std::vector<LlamaLayer>& grads,
                 const Vec& x_in, const Vec& dy_in, Vec& out, Vec& dx) {
    BlockShape s{B, T, llama_block().dims(cfg, lin.split()), chunk};
    LocalAttention attention(s.d.Hkv);
    if (domino.query_chunks) s.query_chunks = {true, attention.kv_prefix(s.d.H, s.d.D)};
    std::vector<BlockActs> acts(L);
    BlockScratch scratch;
    scratch.allocate(s.d, B, T, false, true, chunk, lin.split(), s.query_chunks);
    for (auto& a : acts) a.allocate(llama_block(), s.d, B, T, true, {}, lin.split());
    const BlockCall call{llama_block(), attention, lin, scratch, s, {cos.data(), sin.data()}};
    const float* in = x_in.data();
    for (int l = 0; l < L; ++l) {
      block_forward(call, acts[l], in, layers[l].tensors());
      in = acts[l].residual3.data();
    }
    out.assign(in, in + x_in.size());
    dx = dy_in;
    for (int l = L - 1; l >= 0; --l)
      block_backward(call, dx.data(), acts[l], l ? acts[l - 1].residual3.data() : x_in.data(),
                     layers[l].tensors(), grads[l].tensors());
  };

  std::vector<LlamaLayer> ref_grads = {global[0].zeros(), global[1].zeros()};
  Vec ref_out, ref_dx;
  run(local_linears(), global, ref_grads, x, dy, ref_out, ref_dx);

  std::unique_ptr<CommThread> thread;
  if (domino.on) thread = std::make_unique<CommThread>(tp.split(0, r, "tp", tp.intra_node()));
  TensorParallelLinears lin(tp, sp, thread.get());
  std::vector<LlamaLayer> local = {shard(global[0], d, t, r), shard(global[1], d, t, r)};
  auto mine = [&](const Vec& m) { return my_rows(m, sp, N, C, t, r, chunk); };
  // The step's reductions: TP-SP norm gradients over tp; a replicated key/value head's over the t/K
  // ranks that hold it (§1.8).
  std::unique_ptr<Communicator> kv_group;
  if (t > K) kv_group = tp.split(r / (t / K), r, "tp_kv", tp.intra_node());
  const int64_t q_rows = int64_t(d.H / t) * d.D, kv_rows = 2 * int64_t(std::max(d.K / t, 1)) * d.D;
  auto run_tp = [&](LinearOps& ops, std::vector<LlamaLayer>& grads, Vec& out, Vec& dx) {
    grads = {local[0].zeros(), local[1].zeros()};
    run(ops, local, grads, mine(x), mine(dy), out, dx);
    for (LlamaLayer& g : grads) {
      if (sp)
        for (Vec* v : {&g.attn_norm, &g.mlp_norm}) tp_all_reduce(tp, v->data(), int64_t(v->size()));
      if (kv_group) tp_all_reduce(*kv_group, g.qkv_w.data() + q_rows * C, kv_rows * C);
    }
  };
  std::vector<LlamaLayer> grads;
  Vec out, dx;
  run_tp(lin, grads, out, dx);
  if (domino.on) {  // against the same halves one after the other
    TensorParallelLinears in_order(tp, sp);
    std::vector<LlamaLayer> want_grads;
    Vec want_out, want_dx;
    run_tp(in_order, want_grads, want_out, want_dx);
    expect_same_as_undivided(out, want_out, "output");
    expect_same_as_undivided(dx, want_dx, "d input");
    for (int l = 0; l < L; ++l) {
      auto got = grads[l].all(), want = want_grads[l].all();
      for (size_t i = 0; i < got.size(); ++i) expect_same_as_undivided(*got[i], *want[i], "gradient");
    }
  }

  EXPECT_LT(rel_error(out, mine(ref_out)), 1e-5) << "output";
  EXPECT_LT(rel_error(dx, mine(ref_dx)), 1e-5) << "d input";
  const char* names[] = {"attn_norm", "qkv", "o", "mlp_norm", "gate_up", "down"};
  for (int l = 0; l < L; ++l) {
    LlamaLayer want_layer = shard(ref_grads[l], d, t, r);
    auto got = grads[l].all(), want = want_layer.all();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(rel_error(*got[i], *want[i]), 1e-5) << "layer " << l << " d" << names[i];
  }
}

// K = 4: key/value heads split with the query heads (tp 1, 2, 4). K = 2: split at tp 2, replicated
// on 2 ranks each at tp 4. K = 1 (multi-query): replicated on every rank.
TEST(TensorParallelBlock, LlamaGqaPlain) {
  check_llama_blocks(false, 2);
}
TEST(TensorParallelBlock, LlamaGqaSequenceParallel) {
  check_llama_blocks(true, 2);
}
TEST(TensorParallelBlock, LlamaMhaSequenceParallel) {
  check_llama_blocks(true, 4);
}
TEST(TensorParallelBlock, LlamaMqaPlain) {
  check_llama_blocks(false, 1);
}
TEST(TensorParallelBlock, LlamaGqaPlainChunked) {
  check_llama_blocks(false, 2, 10);
}
TEST(TensorParallelBlock, LlamaGqaDominoRows) {
  check_llama_blocks(false, 2, 0, {true, 2, 12});
  check_llama_blocks(false, 2, 0, {true, 2, 12, true});
  check_llama_blocks(true, 2, 0, {true, 2, 12});
}
TEST(TensorParallelBlock, LlamaGqaDominoTokens) {
  check_llama_blocks(false, 2, 0, {true, 1, 16, true});
  check_llama_blocks(true, 2, 0, {true, 1, 16});
}
// TP-SP over sequence chunks (a rank's 36 / t rows in chunks of 4, the last short at tp 4): each
// chunk's column linear gathers the ranks' rows of that chunk, so the rank's tokens interleave by chunk.
TEST(TensorParallelBlock, Gpt2SequenceParallelChunked) {
  check_blocks(true, 4);
}
TEST(TensorParallelBlock, LlamaGqaSequenceParallelChunked) {
  check_llama_blocks(true, 2, 4);
}

TEST(TensorParallelBlock, LlamaDimsRefuseHeadsThatDoNotSplit) {
  ModelConfig cfg;
  cfg.arch = Arch::llama, cfg.n_head = 6, cfg.n_kv_head = 3, cfg.d_model = 36, cfg.d_ff = 54;
  EXPECT_NO_THROW(llama_block().dims(cfg, {3, false}));
  EXPECT_NO_THROW(llama_block().dims(cfg, {6, false}));
  EXPECT_THROW(llama_block().dims(cfg, {4, false}), Error);  // 6 heads over 4
  cfg.n_head = 4, cfg.n_kv_head = 3;
  EXPECT_THROW(llama_block().dims(cfg, {2, false}), Error);  // 3 kv heads over 2
  cfg.n_kv_head = 2, cfg.d_ff = 50;
  EXPECT_THROW(llama_block().dims(cfg, {4, false}), Error);  // d_ff 50 over 4
}

}  // namespace
}  // namespace odyssey
