// BlockActivations::bytes_for (the trainer's memory check) against what allocate() actually holds, for
// shapes that differ in every dimension the formula uses, for every checkpoint policy and layer chunk,
// the attention whole or per query chunk, with the layer inputs in RAM or on disk (and then the scratch
// file's size), for a tensor-parallel rank's piece, GPT-2 and Llama.
#include <gtest/gtest.h>
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include <string>

#include "../dataio/data_test_util.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/llama.h"

namespace odyssey {
namespace {

TEST(Activations, BytesForMatchesAllocate) {
  testing_data::TempDir dir;  // the disk tier's scratch files
  struct Shape {
    int n_layer, n_head, d_model, vocab, B, T;
  };
  for (const Shape& s : {Shape{1, 1, 8, 11, 1, 1}, Shape{2, 5, 40, 67, 3, 37}, Shape{4, 4, 96, 256, 1, 4096},
                         Shape{3, 12, 96, 1000, 2, 129}}) {
    ModelConfig c;
    c.n_layer = s.n_layer, c.n_head = s.n_head, c.d_model = s.d_model, c.vocab_size = s.vocab;
    c.seq_len = s.T;
    // The whole model, a first stage (embeddings, no head), a last one (head, no embeddings) and,
    // with 3 layers, a middle one.
    // The long shape (4096 tokens) only as the whole model with and without a chunked head: the
    // stages and head chunks change no size the short shapes leave untested, and each allocation
    // of this shape clears ~100 MB (8x its time, 68 s under the sanitizers, without this).
    const bool long_shape = int64_t(s.B) * s.T >= 4096;
    std::vector<StageRange> ranges = {{0, c.n_layer}};
    if (!long_shape) ranges.push_back({0, 1});
    if (!long_shape && c.n_layer > 1) ranges.push_back({1, c.n_layer});
    if (!long_shape && c.n_layer > 2) ranges.push_back({1, 2});
    const std::vector<int> head_chunks =
        long_shape ? std::vector<int>{0, 64} : std::vector<int>{0, 1, 64, 100000};
    for (const StageRange& range : ranges)
      for (int head_chunk : head_chunks)
        for (int chunk : {0, 50})
          for (CheckpointPolicy policy : {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                          CheckpointPolicy::keep_attention, CheckpointPolicy::full})
            for (MemoryTier tier : {MemoryTier::ram, MemoryTier::disk})
              for (int qc : {0, 1, 2})  // the attention whole, per query chunk (the local op's K/V prefix,
                                        // or one held beside the qkv, U = 2 rows per token as Ulysses')
                for (TpSplit split : {TpSplit{1, false}, TpSplit{2, false}, TpSplit{2, true}}) {
                  if (tier == MemoryTier::disk && !keeps_layer_inputs(policy)) continue;
                  // A tensor-parallel rank's piece: its heads and widths, its TP-SP token slice, its
                  // vocabulary rows (padded to a multiple of tp).
                  const int t = split.t;
                  if (s.n_head % t != 0 || (split.sequence_parallel && (s.B * s.T) % t != 0)) continue;
                  // The pairings that change the sizes (and keep the test's time small): query chunks
                  // only without TP-SP (under it the attention is whole), the disk tier only at tp 1 and
                  // under TP-SP, a tp piece only of the shapes below 4096 tokens.
                  if (qc > 0 && split.sequence_parallel) continue;
                  if (qc == 2 && t > 1) continue;
                  if (tier == MemoryTier::disk && t > 1 && !split.sequence_parallel) continue;
                  if (t > 1 && long_shape) continue;
                  const int64_t vocab_rows = (s.vocab + t - 1) / t;
                  const int64_t rows = split.rows(int64_t(s.B) * s.T);
                  const int H = s.n_head / t, D = s.d_model / s.n_head;
                  // The query chunks of a layout whose kv heads are kv (per rank).
                  auto chunks = [&](int kv) {
                    if (qc == 0) return QueryChunks{};
                    QueryChunks q = query_chunks(LocalAttention(kv), split, rows, chunk, s.T, H, D);
                    if (qc == 2 && q.on) q.kv = {2 * int64_t(std::max(kv / 2, 1)) * D, 2, false};
                    return q;
                  };
                  const MemoryOptions memory{policy, head_chunk, chunk, tier, dir.path};
                  const std::string what = fmt::format(
                      "{} layers, {} heads, d {}, B {}, T {}, layers [{}, {}), head chunk {}, chunk {}, "
                      "checkpoint {}, tier {}, query chunks {}, tp {}{}",
                      s.n_layer, s.n_head, s.d_model, s.B, s.T, range.layer_begin, range.layer_end,
                      head_chunk, chunk, enum_name(kCheckpointPolicyNames, policy),
                      enum_name(kMemoryTierNames, tier), qc, t, split.sequence_parallel ? " sp" : "");
                  BlockActivations a(gpt2_block());
                  const QueryChunks gq = chunks(H);
                  a.allocate(c, range, s.B, s.T, false, memory, split, vocab_rows, gq);
                  EXPECT_EQ(BlockActivations::bytes_for(gpt2_block(), c, range, s.B, s.T, false, memory,
                                                        split, vocab_rows, gq),
                            a.bytes())
                      << what;
                  // The disk tier's file: as accounted (the layer inputs but the last layer's and a stage's
                  // given input, a record per row chunk, each padded to 4 KiB).
                  const uint64_t disk = kept_output_disk_bytes_for(
                      range.layers(), gq.rows(int(split.rows(int64_t(s.B) * s.T)), chunk, s.T), s.d_model,
                      memory, range.embeddings());
                  EXPECT_EQ(a.kept.disk ? a.kept.disk->file_bytes() : 0, disk) << what;
                  EXPECT_EQ(disk > 0,
                            tier == MemoryTier::disk && range.layers() - 1 - (range.embeddings() ? 0 : 1) > 0)
                      << what;
                  ModelConfig lc = c;  // Llama: GQA over a quarter of the heads when they divide, SwiGLU 3d
                  lc.arch = Arch::llama, lc.n_kv_head = s.n_head % 4 == 0 ? s.n_head / 4 : s.n_head,
                  lc.d_ff = 3 * s.d_model;
                  if (lc.n_kv_head % t != 0 && t % lc.n_kv_head != 0) continue;
                  BlockActivations l(llama_block());
                  const QueryChunks lq = chunks(lc.n_kv_head % t == 0 ? lc.n_kv_head / t : 1);
                  l.allocate(lc, range, s.B, s.T, false, memory, split, vocab_rows, lq);
                  EXPECT_EQ(BlockActivations::bytes_for(llama_block(), lc, range, s.B, s.T, false, memory,
                                                        split, vocab_rows, lq),
                            l.bytes())
                      << "llama, " << what;
                  EXPECT_EQ(l.kept.disk ? l.kept.disk->file_bytes() : 0, disk) << "llama, " << what;
                }
  }
}

}  // namespace
}  // namespace odyssey
