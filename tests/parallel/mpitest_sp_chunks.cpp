// Query-chunked attention under Ulysses (long-context-memory.md §4.8, §6.2 item 8): GPT-2 and Llama
// (GQA: 2 key/value heads, replicated over 4 ranks) with memory.chunk_tokens, the world one Ulysses
// group (np 2, 4), tokens dealt by chunk (shard_positions with the chunk), against one process with
// the same chunks: the token losses summed over the group equal its loss (relative 1e-6; measured:
// bitwise) and the gradients summed over the group equal its gradients (per tensor |g - g_ref| /
// |g_ref| <= 1e-6; measured <= 3.6e-7: the ranks' partial weight gradients and the prefix's dK, dV
// sum in another order; the figures are printed). Each rank's chunks end short (T / P = 76 or 38
// tokens in chunks of 16), or a chunk holds one sequence (T / P + 4: the micro-batch's 2 rows still
// make 2 chunks). Policies none, cheap, keep_attention and full run the same arithmetic: bitwise
// equal to each other. The memory check's estimate is what the run holds, and under full it is below
// the unchunked Ulysses run's. Query chunks other than those the tokens were dealt by are refused.
// Ring 2 (zigzag, contiguous), ring 4 and Ulysses 2 x ring 2 (zigzag) in §4.8's key-outer form: the
// same checks against one process with the same chunks (measured: loss <= 3e-9, gradients <= 4.3e-7),
// and bitwise the layer with a separate dqkv, whose estimate is exactly that dqkv more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/parallel/usp_attention.h"
#include "sp_test_util.h"

namespace odyssey {
namespace {

constexpr int B = 2, T = 152, kChunk = 16;

ModelConfig tiny(const std::string& arch) {
  ModelConfig c;
  c.arch = parse_enum(kArchNames, arch, "model.arch");
  c.n_layer = 2, c.n_head = 4, c.d_model = 64, c.seq_len = T, c.vocab_size = 67;
  if (arch != "gpt2") c.n_kv_head = 2, c.d_ff = 96;  // llama, qwen2
  return c;
}

using sp_test::Batch;

Batch batch(const ModelConfig& c) {
  return sp_test::random_batch(B, T, c.vocab_size, 7, 5, 2);  // some tokens not counted
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
  size_t held = 0, estimate = 0;
};

// One forward and backward of the batch (sliced by pos when an op is given) under `memory`.
Result run_with(const ModelConfig& c, const MemoryOptions& memory, AttentionOp* op,
                const std::vector<int>& pos) {
  auto stage = architecture(c.arch).make_stage(c, StageRange{}, true, {});
  Stage& m = *stage;
  init_parameters(m.params(), m.table(), c, 42);
  m.set_memory(memory);
  if (op) m.set_attention(op);
  const Batch b = batch(c);
  const int Tl = int(pos.size());
  std::vector<int> inputs(size_t(B) * Tl), targets(size_t(B) * Tl);
  shard_rows(inputs.data(), b.inputs.data(), B, T, pos);
  shard_rows(targets.data(), b.targets.data(), B, T, pos);
  std::fill(m.grads(), m.grads() + m.table().total(), 0.0f);
  int64_t n = 0;
  Result r;
  r.loss = m.forward_backward(inputs.data(), targets.data(), pos.data(), B, Tl, 1.0f / float(b.count), &n);
  r.held = m.activation_bytes();
  r.estimate = m.activation_bytes_for(B, Tl);
  r.grads.assign(m.grads(), m.grads() + m.table().total());
  return r;
}

Result run(const ModelConfig& c, const MemoryOptions& memory, SequenceParallelAttention* op,
           const std::vector<int>& pos) {
  return run_with(c, memory, op, pos);
}

std::vector<int> all_positions() {
  std::vector<int> p(T);
  for (int i = 0; i < T; ++i) p[size_t(i)] = i;
  return p;
}

// The largest per-tensor relative error |got - want| / |want| of the gradients, each checked ≤ 1e-6.
double worst_grad_error(const ModelConfig& c, const std::vector<float>& want, const std::vector<float>& got,
                        const std::string& what) {
  auto stage = architecture(c.arch).make_stage(c, StageRange{}, false, {});
  double worst = 0;
  for (const ParamInfo& t : stage->table().tensors()) {
    double e2 = 0, s2 = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double g = want[size_t(i)], d = double(got[size_t(i)]) - g;
      e2 += d * d, s2 += g * g;
    }
    const double rel = std::sqrt(e2 / std::max(s2, 1e-60));
    EXPECT_LE(rel, 1e-6) << what << ", " << t.name;
    worst = std::max(worst, rel);
  }
  return worst;
}

TEST(SpChunks, UlyssesQueryChunksMatchOneProcessWithChunks) {
  const int P = world().size();
  if (P == 1) GTEST_SKIP() << "Ulysses needs 2 or more ranks";
  ProcessGrid grid(world(), {.sp_ulysses = P});
  Communicator& sp = grid.sp();
  for (const std::string arch : {"gpt2", "llama", "qwen2"}) {
    const ModelConfig c = tiny(arch);
    // kChunk: chunks ending short; T / P + 4: one chunk per sequence (the B rows make more than one).
    for (int chunk : {kChunk, T / P + 4}) {
      SpAttentionOptions so;
      so.n_kv_head = c.kv_heads();
      so.chunk_tokens = chunk;
      SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring(), so);
      const std::vector<int> pos = shard_positions(T, op.shard());
      std::vector<Result> policies;
      for (CheckpointPolicy policy : {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                      CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
        const MemoryOptions memory{policy, 0, chunk};
        const std::string what = fmt::format("{}, Ulysses {}, chunk {}, {}", arch, P, chunk,
                                             enum_name(kCheckpointPolicyNames, policy));
        const Result want = run(c, memory, nullptr, all_positions());
        Result got = run(c, memory, &op, pos);
        EXPECT_EQ(got.held, got.estimate) << what;
        // Losses and the replicated weights' gradients: sums over the group.
        // (each rank's loss as the 8 bytes of its double, summed in double on every rank)
        std::vector<double> parts(static_cast<size_t>(P));
        sp.all_gather(&got.loss, parts.data(), sizeof(double), DType::u8);
        double total = 0;
        for (double p : parts) total += p;
        EXPECT_NEAR(total, want.loss, 1e-6 * std::abs(want.loss)) << what;
        sp.all_reduce(got.grads.data(), got.grads.size(), DType::f32);
        const double worst = worst_grad_error(c, want.grads, got.grads, what);
        if (world().rank() == 0)
          std::printf("  %-44s loss rel diff %.1e, grads worst |dg|/|g| %.1e, bitwise %s\n", what.c_str(),
                      std::abs(total / want.loss - 1), worst, got.grads == want.grads ? "yes" : "no");
        if (!policies.empty()) {  // the same arithmetic as none
          EXPECT_EQ(got.loss, policies.front().loss) << what;
          EXPECT_EQ(got.grads, policies.front().grads) << what;
        }
        policies.push_back(std::move(got));
      }
      // Under full the sequence-wide attention tensors are gone: the unchunked Ulysses run holds more
      // (the layer's whole qkv and attention output, the op's head-sharded copies and scratch).
      auto whole = architecture(c.arch).make_stage(c, StageRange{}, false, {});
      whole->set_memory({CheckpointPolicy::full, 0, 0});
      whole->set_attention(&op);
      EXPECT_LT(policies.back().estimate, whole->activation_bytes_for(B, T / P))
          << arch << ", chunk " << chunk;
    }
    // Query chunks the tokens were not dealt by are refused (before any message, every rank alike).
    SpAttentionOptions contiguous;
    contiguous.n_kv_head = c.kv_heads();
    SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring(), contiguous);
    EXPECT_THROW(run(c, {CheckpointPolicy::full, 0, kChunk}, &op, shard_positions(T, op.shard())), Error)
        << arch;
  }
}

// The op with its backward out of place (a separate dqkv, as before §4.8's key-outer form).
class OutOfPlace : public AttentionOp {
 public:
  explicit OutOfPlace(AttentionOp& op) : op_(op) {}
  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override {
    op_.forward(out, lse, qkv, B, T, H, D, saved);
  }
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override {
    op_.backward(dqkv, dout, out, lse, qkv, B, T, H, D, saved);
  }
  bool saves_qkv() const override { return op_.saves_qkv(); }
  size_t bytes_for(int B, int T, int H, int D, int n_layer) const override {
    return op_.bytes_for(B, T, H, D, n_layer);
  }

 private:
  AttentionOp& op_;
};

// Ring and hybrid layouts (§4.8's key-outer form: the token-local ops per chunk, the ring steps the
// outer loop over the local query rows, the backward's gradient written over the layer's qkv): within
// 1e-6 of one process with the same chunks (the LSE merges and the per-block dK/dV sums change the
// summation order), every policy bitwise equal, bitwise the same layer with a separate dqkv, whose
// accounting holds exactly the [B Tl, (H + 2 Hkv) D] dqkv more.
TEST(SpChunks, RingAndHybridKeyOuterMatchOneProcessWithChunks) {
  const int P = world().size();
  if (P == 1) GTEST_SKIP() << "the ring needs 2 or more ranks";
  const int Tl = T / P;  // every layout's tokens per rank
  for (const std::string arch : {"gpt2", "llama", "qwen2"}) {
    const ModelConfig c = tiny(arch);
    const FusedQkv f{c.n_head, c.kv_heads(), c.head_dim()};
    // kChunk: chunks ending short; Tl + 4: one chunk of each rank's rows per sequence.
    for (int chunk : {kChunk, Tl + 4}) {
      // One process with these chunks (every policy is bitwise the same there: test_checkpointing).
      const Result want = run(c, {CheckpointPolicy::full, 0, chunk}, nullptr, all_positions());
      for (const sp_test::Layout& l : sp_test::layouts(P)) {
        // The ring alone and the hybrid; contiguous rings at np 2 only (a 2-core host runs np 4 slowly).
        if (l.R == 1 || (P > 2 && l.layout != RingLayout::zigzag)) continue;
        ProcessGrid grid(world(), {.sp_ulysses = l.U, .sp_ring = l.R});
        Communicator& sp = grid.sp();
        SpAttentionOptions so;
        so.layout = l.layout;
        so.n_kv_head = c.kv_heads();
        SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring(), so);
        ASSERT_TRUE(op.backward_in_place() && !op.chunks_queries()) << l.name();
        const std::vector<int> pos = shard_positions(T, op.shard());
        ASSERT_EQ(int(pos.size()), Tl);
        std::vector<Result> policies;
        for (CheckpointPolicy policy : {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                        CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
          const MemoryOptions memory{policy, 0, chunk};
          const std::string what = fmt::format("{}, {}, chunk {}, {}", arch, l.name(), chunk,
                                               enum_name(kCheckpointPolicyNames, policy));
          Result got = run(c, memory, &op, pos);
          EXPECT_EQ(got.held, got.estimate) << what;
          if (!policies.empty()) {  // the same arithmetic as none
            EXPECT_EQ(got.loss, policies.front().loss) << what;
            EXPECT_EQ(got.grads, policies.front().grads) << what;
          }
          policies.push_back(std::move(got));
        }
        const std::string what = fmt::format("{}, {}, chunk {}", arch, l.name(), chunk);
        const Result& got = policies.back();  // full
        std::vector<double> parts(static_cast<size_t>(sp.size()));
        sp.all_gather(&got.loss, parts.data(), sizeof(double), DType::u8);
        double total = 0;
        for (double p : parts) total += p;
        EXPECT_NEAR(total, want.loss, 1e-6 * std::abs(want.loss)) << what;
        std::vector<float> summed = got.grads;
        sp.all_reduce(summed.data(), summed.size(), DType::f32);
        const double worst = worst_grad_error(c, want.grads, summed, what);
        if (world().rank() == 0)
          std::printf("  %-36s loss rel diff %.1e, grads worst |dg|/|g| %.1e\n", what.c_str(),
                      std::abs(total / want.loss - 1), worst);
        // A separate dqkv under full: the same bits, and exactly its floats more in the accounting.
        OutOfPlace apart(op);
        const Result sep = run_with(c, {CheckpointPolicy::full, 0, chunk}, &apart, pos);
        EXPECT_EQ(sep.loss, got.loss) << what;
        EXPECT_EQ(sep.grads, got.grads) << what;
        EXPECT_EQ(sep.estimate - got.estimate, size_t(B) * Tl * size_t(f.width()) * sizeof(float)) << what;
      }
    }
  }
}

}  // namespace
}  // namespace odyssey
