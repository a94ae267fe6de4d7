// Tensor-parallel ops against the single-process ops (tensor-pipeline-parallelism.md §1): a
// column-parallel linear followed by a row-parallel one (plain TP and Megatron TP-SP; its backward
// also split as zero-bubble pipelines run it: dx now, the weight GEMMs later), the
// vocab-parallel embedding and the vocab-parallel cross-entropy, at tp = world size (1, 2, 4), on
// odd sizes (37 features, 15 output features per rank at tp 4, a vocabulary of 103 padded to 104,
// one of 3 where a tp-4 rank holds only padding). Every rank builds the global tensors from the same
// seed, runs its shard, and compares with the slice of the single-process result. The bytes each op
// moves are asserted against §1.10's formulas, f_t * n * C * 4 per gather or reduce-scatter.
//
// Tolerances (fp32, relative to the reference tensor's largest magnitude): 1e-5 for results that
// go through a tp sum (the row-parallel partial products, their gradients, the normaliser), which
// differ from the single GEMM only in summation order; the embedding is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/kernels/cross_entropy.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/linear.h"
#include "odyssey/model/deferred_weight_grads.h"
#include "odyssey/parallel/tp_linear.h"
#include "odyssey/parallel/tp_ops.h"
#include "odyssey/parallel/vocab_parallel.h"
#include "sp_test_util.h"
#include "tp_test_util.h"

namespace odyssey {
namespace {

using tp_test::cols_of;
using tp_test::rel_error;
using tp_test::rows_of;
using Vec = tp_test::Vec;

uint64_t f_bytes(int64_t elements, int t) {
  return uint64_t(elements) * 4 * uint64_t(t - 1) / uint64_t(t);
}

Communicator& tp_group() {
  static ProcessGrid grid(world(), {.tp = world().size()});
  return grid.tp();
}

// x [n, C] -> column-parallel [C -> O] (+ bias) -> row-parallel [O -> C] (+ bias) -> y [n, C], then
// backward from dy; the pair of an attention block or an MLP.
void check_linear_pair(bool sp) {
  Communicator& tp = tp_group();
  const int t = tp.size(), r = tp.rank();
  const int64_t n = 36;
  const int C = 37, O = 60, Or = O / t;
  const Vec x = sp_test::uniform(n * C, 1, 1.0f), W1 = sp_test::uniform(O * C, 2, 0.3f),
            b1 = sp_test::uniform(O, 3, 0.5f), W2 = sp_test::uniform(C * O, 4, 0.3f),
            b2 = sp_test::uniform(C, 5, 0.5f), dy = sp_test::uniform(n * C, 6, 1.0f);
  // The single-process reference.
  Vec h(n * O), y(n * C), dh(n * O, 0.0f), dx(n * C, 0.0f), dW1(O * C, 0.0f), db1(O, 0.0f), dW2(C * O, 0.0f),
      db2(C, 0.0f);
  linear_forward(h.data(), x.data(), W1.data(), b1.data(), n, C, O);
  linear_forward(y.data(), h.data(), W2.data(), b2.data(), n, O, C);
  linear_backward(dh.data(), dW2.data(), db2.data(), dy.data(), h.data(), W2.data(), n, O, C);
  linear_backward(dx.data(), dW1.data(), db1.data(), dh.data(), x.data(), W1.data(), n, C, O);

  // This rank's shards: W1's output rows, W2's input columns; under TP-SP its token slice.
  const Vec W1_r = rows_of(W1, r * Or, Or, C), b1_r(b1.begin() + r * Or, b1.begin() + (r + 1) * Or),
            W2_r = cols_of(W2, C, O, r * Or, Or);
  const int64_t rows = sp ? n / t : n, row0 = sp ? r * rows : 0;
  const Vec x_in = rows_of(x, row0, rows, C), dy_in = rows_of(dy, row0, rows, C);
  // The linears' dx is overwritten: it starts as NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Vec h_r(n * Or), y_out(rows * C), dh_r(n * Or, nan), dx_out(rows * C, nan), dW1_r(Or * C, 0.0f),
      db1_r(Or, 0.0f), dW2_r(C * Or, 0.0f), db2_out(C, 0.0f);
  TensorParallelLinears lin(tp, sp);
  const LinearCall c1{n, C, Or, "fc"}, c2{n, Or, C, "fc_proj"};
  EXPECT_EQ(lin.rows(n), rows);
  tp.stats().reset();
  lin.column_forward(h_r.data(), x_in.data(), W1_r.data(), b1_r.data(), c1);
  lin.row_forward(y_out.data(), h_r.data(), W2_r.data(), b2.data(), c2);
  const uint64_t fwd_ag = tp.stats().group_bytes("tp", CommKind::all_gather),
                 fwd_rs = tp.stats().group_bytes("tp", CommKind::reduce_scatter),
                 fwd_ar = tp.stats().group_bytes("tp", CommKind::all_reduce);
  tp.stats().reset();
  lin.row_backward(dh_r.data(), dW2_r.data(), db2_out.data(), dy_in.data(), h_r.data(), W2_r.data(), c2);
  lin.column_backward(dx_out.data(), dW1_r.data(), db1_r.data(), dh_r.data(), x_in.data(), W1_r.data(), c1);
  if (sp) tp_all_reduce(tp, db2_out.data(), C);  // a TP-SP partial sum: summed over tp once per step

  EXPECT_LT(rel_error(h_r, cols_of(h, n, O, r * Or, Or)), 1e-6) << "column output";
  EXPECT_LT(rel_error(y_out, rows_of(y, row0, rows, C)), 1e-5) << "row output";
  EXPECT_LT(rel_error(dh_r, cols_of(dh, n, O, r * Or, Or)), 1e-6) << "row dx";
  EXPECT_LT(rel_error(dW2_r, cols_of(dW2, C, O, r * Or, Or)), 1e-6) << "row dW";
  EXPECT_LT(rel_error(db2_out, db2), 1e-5) << "row db";
  EXPECT_LT(rel_error(dx_out, rows_of(dx, row0, rows, C)), 1e-5) << "column dx";
  EXPECT_LT(rel_error(dW1_r, rows_of(dW1, r * Or, Or, C)), 1e-6) << "column dW";
  EXPECT_LT(rel_error(db1_r, Vec(db1.begin() + r * Or, db1.begin() + (r + 1) * Or)), 1e-6) << "column db";

  // §1.10 for one column + row pair (half a layer), T = n tokens, B_e = 4:
  //   plain: forward one all-reduce (2 f T C B_e), backward one all-reduce (column dx);
  //   TP-SP (re-gather): forward AG + RS (2 f T C B_e), backward AG dy + AG x + RS dx (3 f T C B_e).
  const uint64_t bwd_ag = tp.stats().group_bytes("tp", CommKind::all_gather),
                 bwd_rs = tp.stats().group_bytes("tp", CommKind::reduce_scatter),
                 bwd_ar = tp.stats().group_bytes("tp", CommKind::all_reduce);
  const uint64_t f = f_bytes(n * C, t);
  if (sp) {
    EXPECT_EQ(fwd_ag + fwd_rs, 2 * f);
    EXPECT_EQ(fwd_ar, 0u);
    EXPECT_EQ(bwd_ag, 2 * f);
    EXPECT_EQ(bwd_rs, f);
    EXPECT_EQ(bwd_ar, t > 1 ? bus_bytes(CommKind::all_reduce, C * 4, t) : 0u);  // the db2 sum above
  } else {
    EXPECT_EQ(fwd_ar, 2 * f);
    EXPECT_EQ(fwd_ag + fwd_rs, 0u);
    EXPECT_EQ(bwd_ar, 2 * f);
    EXPECT_EQ(bwd_ag + bwd_rs, 0u);
  }

  // The zero-bubble split (model/deferred_weight_grads.h): dx and db now, bitwise the plain backward's;
  // the weight gradients untouched until the recorded GEMMs run, then bitwise too (the operands were
  // copied: under TP-SP the gathered dy and x share one scratch buffer).
  Vec dh_s(n * Or, nan), dx_s(rows * C, nan), dW1_s(Or * C, 0.0f), db1_s(Or, 0.0f), dW2_s(C * Or, 0.0f),
      db2_s(C, 0.0f);
  DeferredWeightGrads later;
  lin.row_backward_input(dh_s.data(), dW2_s.data(), db2_s.data(), dy_in.data(), h_r.data(), W2_r.data(), c2,
                         later);
  lin.column_backward_input(dx_s.data(), dW1_s.data(), db1_s.data(), dh_s.data(), x_in.data(), W1_r.data(),
                            c1, later);
  if (sp) tp_all_reduce(tp, db2_s.data(), C);
  EXPECT_EQ(dh_s, dh_r);
  EXPECT_EQ(dx_s, dx_out);
  EXPECT_EQ(db1_s, db1_r);
  EXPECT_EQ(db2_s, db2_out);
  EXPECT_EQ(dW1_s, Vec(Or * C, 0.0f)) << "the weight GEMMs wait for run()";
  EXPECT_EQ(later.bytes(), size_t(n * (C + Or) + n * (Or + C)) * sizeof(float));
  later.run();
  EXPECT_EQ(dW1_s, dW1_r);
  EXPECT_EQ(dW2_s, dW2_r);
  EXPECT_TRUE(later.empty());
}

TEST(TensorParallel, LinearPairPlain) {
  check_linear_pair(false);
}
TEST(TensorParallel, LinearPairSequenceParallel) {
  check_linear_pair(true);
}

TEST(TensorParallel, TokenSlicesMustDivide) {
  Communicator& tp = tp_group();
  if (tp.size() == 1) GTEST_SKIP() << "every count divides over one rank";
  Vec slice(37 * 3), full(37 * 3 * tp.size());
  EXPECT_THROW(tp_gather_tokens(tp, slice.data(), full.data(), 37, 3), Error);
  TensorParallelLinears lin(tp, true);
  EXPECT_THROW(lin.column_forward(full.data(), slice.data(), slice.data(), nullptr, {37, 3, 3, "qkv"}),
               Error);
}

void check_embedding(int64_t V, bool slice_tokens) {
  Communicator& tp = tp_group();
  const int t = tp.size(), r = tp.rank();
  const int64_t n = 36;
  const int C = 37;
  const VocabShard vs = vocab_shard(tp, V);
  EXPECT_EQ(vs.Vp % t, 0);
  EXPECT_GE(vs.Vp, V);
  std::vector<int> ids(n);
  for (int64_t j = 0; j < n; ++j) ids[j] = int((j * 7 + 3) % V);
  ids[5] = ids[9] = int(V - 1);  // a repeated id, the last real row
  const Vec E = sp_test::uniform(V * C, 7, 1.0f), de = sp_test::uniform(n * C, 8, 1.0f);
  Vec e(n * C), dE(V * C, 0.0f);
  embedding_forward(e.data(), ids.data(), nullptr, E.data(), nullptr, n, C);
  embedding_backward(dE.data(), nullptr, de.data(), ids.data(), nullptr, n, C);

  Vec E_r(vs.rows * C, 0.0f);  // padding rows stay zero
  std::copy_n(E.begin() + vs.lo * C, vs.real * C, E_r.begin());
  const int64_t rows = slice_tokens ? n / t : n, row0 = slice_tokens ? r * rows : 0;
  Vec e_out(rows * C), dE_r(vs.rows * C, 0.0f);
  const Vec de_in = rows_of(de, row0, rows, C);
  FloatBuffer scratch;
  tp.stats().reset();
  vocab_embedding_forward(tp, e_out.data(), ids.data(), E_r.data(), vs, n, C, slice_tokens, scratch);
  const uint64_t fwd = tp.stats().group_bytes("tp");
  tp.stats().reset();
  vocab_embedding_backward(tp, dE_r.data(), de_in.data(), ids.data(), vs, n, C, slice_tokens, scratch);
  const uint64_t bwd = tp.stats().group_bytes("tp");

  EXPECT_EQ(rel_error(e_out, rows_of(e, row0, rows, C)), 0.0) << "one term and zeros: exact";
  Vec want(vs.rows * C, 0.0f);
  std::copy_n(dE.begin() + vs.lo * C, vs.real * C, want.begin());
  EXPECT_EQ(rel_error(dE_r, want), 0.0) << "the same additions in the same order";
  // §1.10: all-reduce 2 f T C B_e forward and nothing back; reduce-scatter f T C B_e, all-gather back.
  const uint64_t f = f_bytes(n * C, t);
  EXPECT_EQ(fwd, slice_tokens ? f : 2 * f);
  EXPECT_EQ(bwd, slice_tokens ? f : 0u);
}

TEST(TensorParallel, VocabEmbeddingReplicated) {
  check_embedding(103, false);
}
TEST(TensorParallel, VocabEmbeddingTokenSlices) {
  check_embedding(103, true);
}
TEST(TensorParallel, VocabEmbeddingShardOfPaddingOnly) {
  check_embedding(3, true);
}

TEST(TensorParallel, VocabShardOutOfRangeIdIsAnError) {
  Communicator& tp = tp_group();
  const VocabShard vs = vocab_shard(tp, 10);
  std::vector<int> ids(4 * tp.size(), 1);
  ids[2] = 10;
  Vec E_r(vs.rows * 3), e(ids.size() * 3);
  FloatBuffer scratch;
  EXPECT_THROW(vocab_embedding_forward(tp, e.data(), ids.data(), E_r.data(), vs, int64_t(ids.size()), 3,
                                       false, scratch),
               Error);
}

void check_cross_entropy(int64_t V) {
  Communicator& tp = tp_group();
  const int t = tp.size();
  const int64_t n = 36;
  const VocabShard vs = vocab_shard(tp, V);
  Vec logits = sp_test::uniform(n * V, 9, 4.0f);
  std::vector<int> targets(n);
  for (int64_t j = 0; j < n; ++j) targets[j] = int((j * 11 + 1) % V);
  targets[3] = -1;  // ignored
  targets[4] = int(V - 1);
  logits[4 * V + V - 1] = 30.0f;  // a confident, correct row
  const float dloss = 1.0f / 35;
  Vec losses(n), dlogits = logits, losses_fb(n);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), n, V);
  cross_entropy_forward_backward(dlogits.data(), losses_fb.data(), targets.data(), n, V, dloss);

  // This rank's columns; padding columns hold a huge value that must not enter the softmax.
  Vec logits_r(n * vs.rows, 1e30f);
  for (int64_t j = 0; j < n; ++j)
    std::copy_n(logits.begin() + j * V + vs.lo, vs.real, logits_r.begin() + j * vs.rows);
  Vec got(n), got_fb(n), dlogits_r = logits_r;
  FloatBuffer scratch;
  vp_cross_entropy_forward(tp, got.data(), logits_r.data(), targets.data(), vs, n, scratch);
  tp.stats().reset();
  vp_cross_entropy_forward_backward(tp, dlogits_r.data(), got_fb.data(), targets.data(), vs, n, dloss,
                                    scratch);
  const uint64_t bytes = tp.stats().group_bytes("tp", CommKind::all_reduce);

  EXPECT_LT(rel_error(got, losses), 1e-6);
  EXPECT_LT(rel_error(got_fb, losses_fb), 1e-6);
  EXPECT_EQ(got[3], 0.0f);
  Vec want(n * vs.rows, 0.0f);  // padding columns: exactly zero
  for (int64_t j = 0; j < n; ++j)
    std::copy_n(dlogits.begin() + j * V + vs.lo, vs.real, want.begin() + j * vs.rows);
  EXPECT_LT(rel_error(dlogits_r, want), 1e-6);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = vs.real; c < vs.rows; ++c) ASSERT_EQ(dlogits_r[j * vs.rows + c], 0.0f);
  // §1.6: a MAX of n floats, then the normaliser and the target logit packed into one SUM of 2n.
  EXPECT_EQ(bytes, bus_bytes(CommKind::all_reduce, n * 4, t) + bus_bytes(CommKind::all_reduce, 2 * n * 4, t));

  // Rows ld > rows floats apart (the LM head's padded block): the same bits, the gap never touched.
  const int64_t ld = vs.rows + 5;
  Vec strided(n * ld, -7.0f);
  for (int64_t j = 0; j < n; ++j)
    std::copy_n(logits_r.begin() + j * vs.rows, vs.rows, strided.begin() + j * ld);
  Vec got_s(n), got_fb_s(n), dstrided = strided;
  vp_cross_entropy_forward(tp, got_s.data(), strided.data(), targets.data(), vs, n, scratch, ld);
  vp_cross_entropy_forward_backward(tp, dstrided.data(), got_fb_s.data(), targets.data(), vs, n, dloss,
                                    scratch, ld);
  EXPECT_EQ(got_s, got);
  EXPECT_EQ(got_fb_s, got_fb);
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_TRUE(std::equal(dlogits_r.begin() + j * vs.rows, dlogits_r.begin() + (j + 1) * vs.rows,
                           dstrided.begin() + j * ld))
        << "row " << j;
    for (int64_t c = vs.rows; c < ld; ++c) ASSERT_EQ(dstrided[j * ld + c], -7.0f) << "gap of row " << j;
  }
}

TEST(TensorParallel, VocabCrossEntropy) {
  check_cross_entropy(103);
}
TEST(TensorParallel, VocabCrossEntropyShardOfPaddingOnly) {
  check_cross_entropy(3);
}

}  // namespace
}  // namespace odyssey
