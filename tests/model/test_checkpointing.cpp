// Activation checkpointing (memory.checkpoint = cheap, keep_attention, full): each layer keeps all but
// its norm outputs and MLP activation (cheap), or its output (and under keep_attention its attention's
// output and lse), and recomputes the rest in its backward with the forward's own calls, so the loss and
// every gradient are bitwise those of checkpoint = none, for GPT-2 and Llama (GQA), with the LM head chunked
// or not, over accumulated micro-batches of different lengths (T not a multiple of anything).
// Sequence-chunked layers (memory.chunk_tokens), their attention per query chunk against the K/V prefix:
// every policy with the same chunks is bitwise none with those chunks, and within fp32 rounding of
// unchunked (the prefix's dK, dV sum over query chunks in another order).
// The disk tier (memory.tier = disk): the layer inputs go to a scratch file and come back, so every
// number is bitwise the RAM tier's, each layer input read back chunk by chunk while the layer above
// runs; a corrupt record is an error naming the layer, the chunk and the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../dataio/data_test_util.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/gpt2.h"

namespace odyssey {
namespace {

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
  size_t activation_bytes = 0;
  int attention_forwards = 0;  // over the run
};

// Counts the attention forwards the stage issues.
struct AttentionCounter : OpObserver {
  int forwards = 0;
  void begin_op(const char* name, double) override { forwards += std::string(name) == "attention.fwd"; }
  void end_op() override {}
};

Result run(const std::string& arch, const MemoryOptions& memory) {
  ModelConfig c;
  c.arch = parse_enum(kArchNames, arch, "model.arch");
  c.n_layer = 3, c.n_head = 5, c.d_model = 35, c.seq_len = 40, c.vocab_size = 67;
  if (arch == "llama") c.n_head = 4, c.n_kv_head = 2, c.d_model = 32, c.d_ff = 40;
  auto stage = architecture(c.arch).make_stage(c, StageRange{}, true, {});
  Stage& model = *stage;
  init_parameters(model.params(), model.table(), c, 11);
  model.set_memory(memory);
  std::fill(model.grads(), model.grads() + model.table().total(), 0.0f);
  AttentionCounter counter;
  model.set_observer(&counter);
  Result r;
  // Two micro-batches accumulated, of different shapes (the activations are re-sized in between).
  for (auto [B, T] : {std::pair{2, 37}, std::pair{3, 29}}) {
    std::vector<int> in(size_t(B * T)), tg(size_t(B * T));
    for (int i = 0; i < B * T; ++i) in[size_t(i)] = (i * 13 + T) % 67, tg[size_t(i)] = (i * 7 + B) % 67;
    int64_t n = 0;
    r.losses.push_back(model.forward_backward(in.data(), tg.data(), nullptr, B, T, 1.0f / 200, &n));
    r.activation_bytes = model.activation_bytes();
  }
  r.grads.assign(model.grads(), model.grads() + model.table().total());
  r.attention_forwards = counter.forwards;
  return r;
}

TEST(Checkpointing, RecomputingPoliciesAreBitwiseNone) {
  for (const char* arch : {"gpt2", "llama"})
    for (int head_chunk : {0, 16}) {
      const Result none = run(arch, {CheckpointPolicy::none, head_chunk});
      const Result cheap = run(arch, {CheckpointPolicy::cheap, head_chunk});
      EXPECT_EQ(cheap.losses, none.losses) << arch << ", head chunk " << head_chunk;
      EXPECT_EQ(cheap.grads, none.grads) << arch << ", head chunk " << head_chunk;
      EXPECT_EQ(cheap.attention_forwards, 6);
      EXPECT_LT(cheap.activation_bytes, none.activation_bytes);
      const Result keep = run(arch, {CheckpointPolicy::keep_attention, head_chunk});
      const Result full = run(arch, {CheckpointPolicy::full, head_chunk});
      EXPECT_EQ(keep.losses, none.losses) << arch << ", head chunk " << head_chunk;
      EXPECT_EQ(keep.grads, none.grads) << arch << ", head chunk " << head_chunk;
      EXPECT_EQ(full.losses, none.losses) << arch << ", head chunk " << head_chunk;
      EXPECT_EQ(full.grads, none.grads) << arch << ", head chunk " << head_chunk;
      // Two micro-steps of 3 layers: keep_attention never reruns attention, full reruns all but the last.
      EXPECT_EQ(none.attention_forwards, 6);
      EXPECT_EQ(keep.attention_forwards, 6);
      EXPECT_EQ(full.attention_forwards, 10);
      EXPECT_LT(full.activation_bytes, keep.activation_bytes);
      EXPECT_LT(keep.activation_bytes, none.activation_bytes);
    }
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

TEST(Checkpointing, ChunkedLayersAreBitwiseAcrossPoliciesAndCloseToUnchunked) {
  for (const char* arch : {"gpt2", "llama"}) {
    const Result whole = run(arch, {CheckpointPolicy::none, 16, 0});
    // Chunks of 16 and 31 rows: micro-batches of 74 and 87 rows end in a short chunk; 200: one chunk.
    for (int chunk : {16, 31, 200}) {
      const Result none = run(arch, {CheckpointPolicy::none, 16, chunk});
      const Result cheap = run(arch, {CheckpointPolicy::cheap, 16, chunk});
      const Result keep = run(arch, {CheckpointPolicy::keep_attention, 16, chunk});
      const Result full = run(arch, {CheckpointPolicy::full, 16, chunk});
      const std::string what = std::string(arch) + ", chunk " + std::to_string(chunk);
      EXPECT_EQ(cheap.losses, none.losses) << what;
      EXPECT_EQ(cheap.grads, none.grads) << what;
      EXPECT_EQ(keep.losses, none.losses) << what;
      EXPECT_EQ(keep.grads, none.grads) << what;
      EXPECT_EQ(full.losses, none.losses) << what;
      EXPECT_EQ(full.grads, none.grads) << what;
      // Attention calls: one per chunk (one chunk: the whole-sequence call) per layer per micro-batch
      // (2 x 37 and 3 x 29 rows; query chunks stay within a sequence). keep_attention never reruns
      // attention; full reruns every layer but the last of each micro-batch, and of the last the
      // chunks but its last (the one its buffers still hold).
      auto chunks = [&](int B, int T) { return chunk < B * T ? B * ((T + chunk - 1) / chunk) : 1; };
      const int u1 = chunks(2, 37), u2 = chunks(3, 29);
      EXPECT_EQ(none.attention_forwards, 3 * (u1 + u2)) << what;
      EXPECT_EQ(keep.attention_forwards, 3 * (u1 + u2)) << what;
      EXPECT_EQ(full.attention_forwards, 3 * (u1 + u2) + 3 * u1 - 1 + 3 * u2 - 1) << what;
      if (chunk == 200) {  // one chunk: the unchunked calls
        EXPECT_EQ(none.losses, whole.losses) << what;
        EXPECT_EQ(none.grads, whole.grads) << what;
      }
      for (size_t i = 0; i < whole.losses.size(); ++i)
        EXPECT_NEAR(none.losses[i], whole.losses[i], 1e-6 * std::abs(whole.losses[i])) << what;
      EXPECT_LT(relative_difference(none.grads, whole.grads), 1e-5) << what;
      // A working layer holding one chunk keeps less than one holding every row; with query chunks its
      // qkv, attention output and lse too (under keep_attention not the last two, the kept layers' own).
      if (chunk == 16) {
        EXPECT_LT(full.activation_bytes, run(arch, {CheckpointPolicy::full, 16, 0}).activation_bytes) << what;
        EXPECT_LT(full.activation_bytes, keep.activation_bytes) << what;
        EXPECT_LT(none.activation_bytes, whole.activation_bytes)
            << what;  // backward's d(out), dqkv: one chunk
      }
    }
  }
}

TEST(Checkpointing, DiskTierIsBitwiseRamTier) {
  testing_data::TempDir dir;
  for (const char* arch : {"gpt2", "llama"})
    for (int chunk : {0, 16})  // 16: micro-batches of 74 and 87 rows end in a short chunk
      for (CheckpointPolicy policy : {CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
        const Result ram = run(arch, {policy, 16, chunk});
        const Result disk = run(arch, {policy, 16, chunk, MemoryTier::disk, dir.path});
        const std::string what = std::string(arch) + ", chunk " + std::to_string(chunk) + ", " +
                                 enum_name(kCheckpointPolicyNames, policy);
        EXPECT_EQ(disk.losses, ram.losses) << what;
        EXPECT_EQ(disk.grads, ram.grads) << what;
        EXPECT_EQ(disk.attention_forwards, ram.attention_forwards) << what;
        // One layer input resident (the slot) instead of three (the embeddings' output and two layer
        // outputs; the last layer's output is in d(residual) in both tiers).
        EXPECT_LT(disk.activation_bytes, ram.activation_bytes) << what;
      }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path)) << "scratch files are unlinked";
}

// The disk tier's records are per (layer, row chunk): the backward reads each chunk of a layer's input
// while the layer above still runs (none queued late), whether the attention runs per query chunk
// (chunk 8: four per sequence) or whole (chunk 0), for GPT-2 and Llama, micro-batch 2; every byte
// written is read once.
TEST(Checkpointing, DiskTierReadsChunksWhileTheLayerAboveRuns) {
  testing_data::TempDir dir;
  for (const char* arch : {"gpt2", "llama"})
    for (int chunk : {0, 8, 24}) {  // 24: each sequence of 32 ends in a short chunk
      ModelConfig c;
      c.arch = parse_enum(kArchNames, arch, "model.arch");
      c.n_layer = 4, c.n_head = 2, c.d_model = 16, c.seq_len = 32, c.vocab_size = 50;
      if (c.arch == Arch::llama) c.n_kv_head = 1, c.d_ff = 24;
      auto stage = architecture(c.arch).make_stage(c, StageRange{}, true, {});
      Stage& model = *stage;
      init_parameters(model.params(), model.table(), c, 3);
      model.set_memory({CheckpointPolicy::full, 0, chunk, MemoryTier::disk, dir.path});
      auto acts = model.make_activations();
      std::vector<int> in(64), tg(64);
      for (int i = 0; i < 64; ++i) in[size_t(i)] = i % 50, tg[size_t(i)] = (i * 3) % 50;
      for (int step = 0; step < 2; ++step) {
        model.forward(*acts, in.data(), tg.data(), nullptr, 2, 32);
        model.loss(*acts, 1.0f / 64, nullptr);
        model.backward(*acts);
      }
      const OffloadStats io = acts->offload();
      const std::string what = std::string(arch) + ", chunk " + std::to_string(chunk);
      // Layers 0..2's inputs (the embeddings' output and two layer outputs), 64 rows x 16 floats, twice.
      EXPECT_EQ(io.bytes_written, 2u * 3 * 64 * 16 * 4) << what;
      EXPECT_EQ(io.bytes_read, io.bytes_written) << what;
      EXPECT_EQ(io.bytes_read_late, 0u) << what;
    }
}

TEST(Checkpointing, DiskTierCorruptChunkRecordIsANamedError) {
  testing_data::TempDir dir;
  ModelConfig c;
  c.n_layer = 3, c.n_head = 2, c.d_model = 16, c.seq_len = 32, c.vocab_size = 50;
  GPT2 model(c);
  init_parameters(model.params(), model.table(), c, 3);
  model.set_memory({CheckpointPolicy::full, 0, 8, MemoryTier::disk, dir.path});
  auto acts = model.make_activations();
  std::vector<int> in(64), tg(64);
  for (int i = 0; i < 64; ++i) in[size_t(i)] = i % 50, tg[size_t(i)] = (i * 3) % 50;
  model.forward(*acts, in.data(), tg.data(), nullptr, 2, 32);
  model.loss(*acts, 1.0f / 64, nullptr);
  auto& kept = static_cast<BlockActivations&>(*acts).kept;
  OffloadFile& file = *kept.disk;
  EXPECT_EQ(file.file_bytes(), model.offload_bytes_for(2, 32));
  // Chunks of 8 rows within each sequence of 32: 8 per layer input, records layer-major.
  EXPECT_EQ(file.records(), 2 * 8);
  file.corrupt_for_test(kept.record(1, 5), 77);  // layer 0's output, the input of layer 1: its chunk 5
  testing_data::expect_error(
      [&] { model.backward(*acts); },
      {"the input of layer 1, chunk 5 of 8 (rows 40..47)", "corrupt", file.path(), "memory.offload_dir"});
}

// Recomputing policies keep the head's input (the last layer's output) in d(residual), where a loss
// with a gradient writes d(output): a second such loss before the next forward is refused by name.
TEST(Checkpointing, SecondGradientLossBeforeTheForwardIsRefused) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 16, c.seq_len = 32, c.vocab_size = 50;
  GPT2 model(c);
  init_parameters(model.params(), model.table(), c, 3);
  model.set_memory({CheckpointPolicy::full, 0, 8});
  auto acts = model.make_activations();
  std::vector<int> in(64), tg(64);
  for (int i = 0; i < 64; ++i) in[size_t(i)] = i % 50, tg[size_t(i)] = (i * 3) % 50;
  model.forward(*acts, in.data(), tg.data(), nullptr, 2, 32);
  const double eval = model.loss(*acts, 0.0f, nullptr);  // no gradient: may run first
  EXPECT_EQ(model.loss(*acts, 1.0f / 64, nullptr), eval);
  testing_data::expect_error([&] { model.loss(*acts, 1.0f / 64, nullptr); },
                             {"loss with a gradient already ran", "memory.checkpoint = full", "forward"});
  model.forward(*acts, in.data(), tg.data(), nullptr, 2, 32);
  EXPECT_EQ(model.loss(*acts, 1.0f / 64, nullptr), eval);
}

TEST(Checkpointing, DiskTierNeedsARecomputingPolicyAndADirectory) {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 16, c.seq_len = 32, c.vocab_size = 50;
  GPT2 model(c);
  testing_data::expect_error(
      [&] {
        model.set_memory({CheckpointPolicy::cheap, 0, 0, MemoryTier::disk, "/tmp"});
      },
      {"memory.tier = disk", "memory.checkpoint = cheap"});
  testing_data::expect_error(
      [&] {
        model.set_memory({CheckpointPolicy::full, 0, 0, MemoryTier::disk, ""});
      },
      {"memory.offload_dir"});
}

}  // namespace
}  // namespace odyssey
