#include "odyssey/parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/kernels/elementwise.h"
#include "odyssey/kernels/vec_math.h"
#include "odyssey/parallel/tp_ops.h"

namespace odyssey {

namespace {

void check_ids(const int* ids, int64_t n, int64_t V, const char* what) {
  for (int64_t j = 0; j < n; ++j)
    ODY_CHECK(ids[j] < V, "vocab-parallel {}: id {} of token {} is outside the vocabulary of {}", what,
              ids[j], j, V);
}

// e [n, C] = E_r[id - lo] for owned ids, 0 elsewhere.
void masked_lookup(float* e, const int* ids, const float* E_r, const VocabShard& s, int64_t n, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    float* row = e + j * C;
    if (s.owns(ids[j]))
      std::copy_n(E_r + (ids[j] - s.lo) * C, C, row);
    else
      std::fill_n(row, C, 0.0f);
  }
}

// The per-token statistics of the shard's real columns, after the group's max m is known:
// stats [2n] = (sum over own real columns of exp(x - m), own target's x - m or 0).
void shard_stats(float* stats, const float* logits_r, int64_t R, const int* targets, const float* m,
                 const VocabShard& s, int64_t n) {
  const int64_t real = s.real;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* x = logits_r + j * R;
    stats[j] = float(sum_exp_shifted(x, real, m[j]));
    stats[n + j] = s.owns(targets[j]) ? x[targets[j] - s.lo] - m[j] : 0.0f;
  }
}

// Runs the two reductions and leaves m [n] (group max) and stats [2n] (group sums) in scratch. R: the
// logits' row stride. Returns {m, stats}.
std::pair<const float*, const float*> group_stats(Communicator& tp, const float* logits_r, int64_t R,
                                                  const int* targets, const VocabShard& s, int64_t n,
                                                  FloatBuffer& scratch) {
  check_ids(targets, n, s.V, "cross-entropy target");
  float* m = scratch.at_least(size_t(3 * n));
  float* stats = m + n;
  const int64_t real = s.real;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    const float* x = logits_r + j * R;
    float mx = -INFINITY;  // a shard of padding only contributes -inf
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < real; ++v) mx = x[v] > mx ? x[v] : mx;
    m[j] = mx;
  }
  if (tp.size() > 1) tp.all_reduce(m, size_t(n), DType::f32, ReduceOp::max);  // before any exp
  shard_stats(stats, logits_r, R, targets, m, s, n);
  tp_all_reduce(tp, stats, 2 * n);
  return {m, stats};
}

}  // namespace

int64_t padded_vocab(int64_t V, int t) {
  return (V + t - 1) / t * t;
}

VocabShard vocab_shard(const Communicator& tp, int64_t V) {
  ODY_CHECK(V > 0, "vocab-parallel: empty vocabulary");
  VocabShard s;
  s.V = V;
  s.Vp = padded_vocab(V, tp.size());
  s.rows = s.Vp / tp.size();
  s.lo = tp.rank() * s.rows;
  s.real = std::clamp<int64_t>(V - s.lo, 0, s.rows);
  return s;
}

void vocab_embedding_forward(Communicator& tp, float* e, const int* ids, const float* E_r,
                             const VocabShard& s, int64_t n, int C, bool slice_tokens, FloatBuffer& scratch) {
  check_ids(ids, n, s.V, "embedding");
  if (slice_tokens) {
    float* partial = scratch.at_least(size_t(n * C));
    masked_lookup(partial, ids, E_r, s, n, C);
    tp_reduce_scatter_tokens(tp, partial, e, n, C);
  } else {
    masked_lookup(e, ids, E_r, s, n, C);
    tp_all_reduce(tp, e, n * C);
  }
}

void vocab_embedding_backward(Communicator& tp, float* dE_r, const float* de, const int* ids,
                              const VocabShard& s, int64_t n, int C, bool slice_tokens,
                              FloatBuffer& scratch) {
  const float* full = de;
  if (slice_tokens) {
    float* g = scratch.at_least(size_t(n * C));
    tp_gather_tokens(tp, de, g, n, C);
    full = g;
  }
  // Serial over tokens: two tokens with the same id add into one row, in token order (deterministic).
  for (int64_t j = 0; j < n; ++j)
    if (s.owns(ids[j])) accumulate(dE_r + (ids[j] - s.lo) * C, full + j * C, size_t(C));
}

uint64_t VocabParallelOps::scratch_floats(int64_t sliced_tokens, int C, int64_t loss_rows) {
  return uint64_t(std::max(sliced_tokens * C, 3 * loss_rows));  // as the at_least calls below ask
}

void vp_cross_entropy_forward(Communicator& tp, float* losses, const float* logits_r, const int* targets,
                              const VocabShard& s, int64_t n, FloatBuffer& scratch, int64_t ld) {
  const auto [m, stats] = group_stats(tp, logits_r, ld > 0 ? ld : s.rows, targets, s, n, scratch);
  for (int64_t j = 0; j < n; ++j)  // -log p[t] = log(sum exp(x - m)) - (x[t] - m)
    losses[j] = targets[j] < 0 ? 0.0f : float(std::log(double(stats[j]))) - stats[n + j];
}

void vp_cross_entropy_forward_backward(Communicator& tp, float* logits_to_dlogits_r, float* losses,
                                       const int* targets, const VocabShard& s, int64_t n, float dloss,
                                       FloatBuffer& scratch, int64_t ld) {
  const int64_t R = s.rows, real = s.real, stride = ld > 0 ? ld : R;
  // Plain pointers, not a structured binding: clang 14 (the fuzz build) cannot capture a binding in an
  // OpenMP region.
  const std::pair<const float*, const float*> group =
      group_stats(tp, logits_to_dlogits_r, stride, targets, s, n, scratch);
  const float* m = group.first;
  const float* stats = group.second;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < n; ++j) {
    float* x = logits_to_dlogits_r + j * stride;
    if (targets[j] < 0) {
      losses[j] = 0.0f;
      std::fill_n(x, R, 0.0f);
      continue;
    }
    losses[j] = float(std::log(double(stats[j]))) - stats[n + j];
    const float scale = dloss / stats[j];
#pragma omp simd
    for (int64_t v = 0; v < real; ++v) x[v] = vexp(x[v] - m[j]) * scale;
    std::fill(x + real, x + R, 0.0f);  // padding columns
    if (s.owns(targets[j])) x[targets[j] - s.lo] -= dloss;
  }
}

VocabParallelOps::VocabParallelOps(Communicator& tp, int64_t V, bool sequence_parallel)
    : tp_(tp), shard_(vocab_shard(tp, V)), sequence_parallel_(sequence_parallel) {}

int64_t VocabParallelOps::rows(int64_t V) const {
  ODY_CHECK(V == shard_.V, "vocab-parallel ops built for a vocabulary of {}, used with {}", shard_.V, V);
  return shard_.rows;
}

const int* VocabParallelOps::slice_order(const int* ids, int64_t n, int chunk) {
  const int t = tp_.size();
  const int64_t R = n / t;
  if (!sequence_parallel_ || chunk <= 0 || chunk >= R) return ids;
  ordered_.resize(size_t(n));
  for (int q = 0; q < t; ++q)
    for (int64_t k = 0; k < R; ++k) ordered_[size_t(q * R + k)] = ids[tp_sp_token(n, t, q, k, chunk)];
  return ordered_.data();
}

void VocabParallelOps::embedding_forward(float* e, const int* ids, const int* positions, const float* E,
                                         const float* P, int64_t n, int C, int chunk, OpObserver* o) {
  ODY_CHECK(!sequence_parallel_ || n % tp_.size() == 0,
            "vocab-parallel embedding: {} tokens do not split over parallel.tp = {} (parallel.tp_sp)", n,
            tp_.size());
  observed(o, "embedding.fwd", 0, [&] {
    vocab_embedding_forward(tp_, e, slice_order(ids, n, chunk), E, shard_, n, C, sequence_parallel_,
                            scratch_);
    if (!P) return;
    const int64_t R = held(n);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < R; ++k)
      accumulate(e + k * C, P + int64_t(positions[token(n, k, chunk)]) * C, size_t(C));
  });
}

void VocabParallelOps::embedding_backward(float* dE, float* dP, const float* de, const int* ids,
                                          const int* positions, int64_t n, int C, int chunk, OpObserver* o) {
  observed(o, "embedding.bwd", 0, [&] {
    vocab_embedding_backward(tp_, dE, de, slice_order(ids, n, chunk), shard_, n, C, sequence_parallel_,
                             scratch_);
    if (!dP) return;
    const int64_t R = held(n);
    for (int64_t k = 0; k < R; ++k)  // serial: repeated positions add in row order
      accumulate(dP + int64_t(positions[token(n, k, chunk)]) * C, de + k * C, size_t(C));
  });
}

void VocabParallelOps::cross_entropy(float* losses, float* logits, int64_t ld, const int* targets, int64_t n,
                                     int64_t V, float dloss, OpObserver* o) {
  ODY_CHECK(V == shard_.V, "vocab-parallel ops built for a vocabulary of {}, used with {}", shard_.V, V);
  if (dloss > 0)
    observed(o, "cross_entropy.fwd_bwd", 0, [&] {
      vp_cross_entropy_forward_backward(tp_, logits, losses, targets, shard_, n, dloss, scratch_, ld);
    });
  else
    observed(o, "cross_entropy.fwd", 0,
             [&] { vp_cross_entropy_forward(tp_, losses, logits, targets, shard_, n, scratch_, ld); });
}

}  // namespace odyssey
