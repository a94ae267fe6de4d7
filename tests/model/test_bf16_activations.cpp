// bf16 activations in 2-byte buffers (MemoryOptions::bf16, model/block.h): under the bf16 policy
// (model/bf16_linears.h) a layer holds norm1, qkv, atty, norm2, up and act as bf16, and a block call
// computes on fp32 copies of them (BlockWide). Both runs compute attention under the bf16 policy (the
// stage turns it on with MemoryOptions::bf16; here an installed LocalAttention keeps it on for the fp32
// buffers too). Every stored value is one the policy rounded to bf16, so
// the loss and every gradient are bitwise those of fp32 buffers holding the same values, under every
// checkpoint policy, with and without sequence chunks, for GPT-2 and Llama (GQA); the activations take
// the bytes activation_bytes_for says, fewer than fp32 buffers take (the kept layers' six tensors at
// half, less the one fp32 copy a micro-batch lends its layers; the recomputing policies' working layer
// stays fp32, so full, which keeps no rounded tensor, takes fp32's bytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "odyssey/model/architecture.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/bf16_linears.h"
#include "odyssey/model/vocab_ops.h"

namespace odyssey {
namespace {
namespace bf16_activations {  // the unity build shares anonymous namespaces between test files

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
  size_t activation_bytes = 0, activation_bytes_for = 0;
};

ModelConfig config(const std::string& arch) {
  ModelConfig c;
  c.arch = parse_enum(kArchNames, arch, "model.arch");
  c.n_layer = 3, c.n_head = 5, c.d_model = 35, c.seq_len = 40, c.vocab_size = 67;
  if (arch == "llama") c.n_head = 4, c.n_kv_head = 2, c.d_model = 32, c.d_ff = 40;
  return c;
}

// Two micro-batches of different shapes accumulated, under the bf16 policy's linears and attention; the
// activations in 2-byte buffers when memory.bf16.
Result run(const std::string& arch, const MemoryOptions& memory) {
  const ModelConfig c = config(arch);
  auto stage = architecture(c.arch).make_stage(c, StageRange{}, true, {});
  Stage& model = *stage;
  init_parameters(model.params(), model.table(), c, 11);
  Bf16Linears linears(local_linears());
  model.set_tensor_parallel(&linears, &local_vocab());
  model.set_memory(memory);
  LocalAttention attention(c.n_kv_head);
  attention.set_bf16(true);
  model.set_attention(&attention);
  std::fill(model.grads(), model.grads() + model.table().total(), 0.0f);
  Result r;
  for (auto [B, T] : {std::pair{2, 37}, std::pair{3, 29}}) {
    std::vector<int> in(size_t(B * T)), tg(size_t(B * T));
    for (int i = 0; i < B * T; ++i) in[size_t(i)] = (i * 13 + T) % 67, tg[size_t(i)] = (i * 7 + B) % 67;
    int64_t n = 0;
    r.losses.push_back(model.forward_backward(in.data(), tg.data(), nullptr, B, T, 1.0f / 200, &n));
    r.activation_bytes = model.activation_bytes();
    r.activation_bytes_for = model.activation_bytes_for(B, T);
  }
  r.grads.assign(model.grads(), model.grads() + model.table().total());
  return r;
}

MemoryOptions options(CheckpointPolicy policy, int chunk, bool bf16) {
  MemoryOptions m{policy, 16, chunk};
  m.bf16 = bf16;
  return m;
}

TEST(Bf16Activations, TwoByteBuffersAreBitwiseTheFp32Ones) {
  for (const char* arch : {"gpt2", "llama"})
    for (int chunk : {0, 16})
      for (CheckpointPolicy policy : {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                      CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
        const std::string what = std::string(arch) + ", chunk " + std::to_string(chunk) + ", " +
                                 enum_name(kCheckpointPolicyNames, policy);
        const Result wide = run(arch, options(policy, chunk, false));
        const Result half = run(arch, options(policy, chunk, true));
        EXPECT_EQ(half.losses, wide.losses) << what;
        EXPECT_EQ(half.grads, wide.grads) << what;
        EXPECT_EQ(half.activation_bytes, half.activation_bytes_for) << what;
        EXPECT_EQ(wide.activation_bytes, wide.activation_bytes_for) << what;
        // full keeps no rounded tensor (its working layer computes in fp32): the same bytes.
        if (policy == CheckpointPolicy::full) {
          EXPECT_EQ(half.activation_bytes, wide.activation_bytes) << what;
        } else {
          EXPECT_LT(half.activation_bytes, wide.activation_bytes) << what;
        }
      }
}

// No checkpointing, no chunks: each of the L layers holds the six tensors (N rows of C, qkv's width, H D,
// C, up, act) at 2 bytes instead of 4, and the micro-batch lends one fp32 copy of them to its calls.
TEST(Bf16Activations, SaveHalfTheSixTensorsLessOneFp32Copy) {
  for (const char* arch : {"gpt2", "llama"}) {
    const ModelConfig c = config(arch);
    const Result wide = run(arch, options(CheckpointPolicy::none, 0, false));
    const Result half = run(arch, options(CheckpointPolicy::none, 0, true));
    const size_t N = 3 * 29, H = size_t(c.n_head), D = size_t(c.head_dim()), Hkv = size_t(c.kv_heads()),
                 C = size_t(c.d_model), F = size_t(c.ffn_dim());
    const size_t up = arch == std::string("llama") ? 2 * F : F;  // SwiGLU: gate | up
    const size_t per_row = C + (H + 2 * Hkv) * D + H * D + C + up + F, L = size_t(c.n_layer);
    EXPECT_EQ(wide.activation_bytes - half.activation_bytes, L * N * per_row * 2 - N * per_row * 4) << arch;
  }
}

}  // namespace bf16_activations
}  // namespace
}  // namespace odyssey
