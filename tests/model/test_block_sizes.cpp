// The block runner's activation and scratch buffers: bytes_for (the memory accounting, the start-up
// check, --dry-run) against what allocate() holds with the same arguments, for GPT-2's and Llama's
// blocks, over shapes that vary every size: B and T, every LayerRows group,
// keep_qkv, tp 1 to 4 (3: widths that 8 does not split into, the Llama K/V heads split or replicated)
// with and without TP-SP and Domino's two slots, backward on and off, the row chunk, and the attention
// whole, key-outer or per query chunk (the K/V prefix in the qkv or beside it, one or two rows per token).
// One object of each class is reused, so allocate also resizes from the previous shape.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "odyssey/model/gpt2.h"
#include "odyssey/model/llama.h"

namespace odyssey {
namespace {

struct Shape {
  int B, T;
};
const Shape kShapes[] = {{1, 1}, {2, 37}, {3, 16}};

std::vector<TpSplit> splits(int N) {
  std::vector<TpSplit> out;
  for (int t : {1, 2, 3, 4})
    for (bool sp : {false, true})
      for (bool overlap : {false, true}) {
        if (t == 1 && (sp || overlap)) continue;
        if (sp && N % t != 0) continue;  // TP-SP slices the tokens evenly
        out.push_back({t, sp, overlap});
      }
  return out;
}

// LayerRows of every group held whole, for a few rows, or not at all.
std::vector<LayerRows> layer_rows() {
  std::vector<LayerRows> out;
  for (int stored : {-1, 0, 7})
    for (int cheap : {-1, 0, 7})
      for (bool sequence : {true, false})
        for (bool output : {true, false})
          for (int qkv : {-1, 5})
            for (int attention : {-1, 5})
              for (int64_t kv : {0, 48}) out.push_back({stored, cheap, sequence, output, qkv, attention, kv});
  return out;
}

// The attention whole, key-outer (ring, hybrid), or per query chunk with the K/V prefix in the qkv, or
// beside it with one or two rows per token (the local op, Ulysses).
std::vector<QueryChunks> query_chunk_forms(int kv_width) {
  QueryChunks outer;
  outer.key_outer = true;
  QueryChunks in_qkv{true, {kv_width, 1, true}};
  QueryChunks beside{true, {kv_width, 2, false}};
  QueryChunks wide{true, {8 * kv_width, 1, false}};  // wider than C: dkv follows the prefix
  return {QueryChunks{}, outer, in_qkv, beside, wide};
}

std::string describe(const ModelConfig& c, const Shape& s, const TpSplit& tp) {
  return fmt::format("{} H {} Hkv {} C {} B {} T {} tp {}{}{}", enum_name(kArchNames, c.arch), c.n_head,
                     c.kv_heads(), c.d_model, s.B, s.T, tp.t, tp.sequence_parallel ? " sp" : "",
                     tp.overlap ? " overlap" : "");
}

std::string describe(const LayerRows& r) {
  return fmt::format("rows stored {} cheap {} sequence {} output {} qkv {} attention {} kv {}", r.stored,
                     r.cheap, r.sequence, r.output, r.qkv, r.attention, r.kv);
}

std::string describe(bool flag, bool backward, int chunk, const QueryChunks& q) {
  return fmt::format("shared_qkv {} backward {} chunk {} query chunks {} kv {}x{}{} key_outer {}", flag,
                     backward, chunk, q.on, q.kv.stride, q.kv.per_row, q.kv.in_qkv ? " in qkv" : "",
                     q.key_outer);
}

// Checks the layer activations and scratch of one architecture's block for every shape; counts the
// cases compared.
void check(const BlockSpec& spec, const ModelConfig& c, int& cases) {
  BlockActs acts;
  BlockScratch scratch;
  const std::vector<LayerRows> rows = layer_rows();
  for (const Shape& s : kShapes)
    for (const TpSplit& tp : splits(s.B * s.T)) {
      if (c.n_head % tp.t != 0 || c.ffn_dim() % tp.t != 0) continue;
      if (c.kv_heads() % tp.t != 0 && tp.t % c.kv_heads() != 0) continue;
      const std::string where = describe(c, s, tp);
      const BlockDims d = spec.dims(c, tp);
      for (bool keep_qkv : {true, false})
        for (const LayerRows& r : rows) {
          acts.allocate(spec, d, s.B, s.T, keep_qkv, r, tp);
          ASSERT_EQ(BlockActs::bytes_for(spec, d, s.B, s.T, keep_qkv, r, tp), acts.bytes())
              << where << ", keep_qkv " << keep_qkv << ", " << describe(r);
          ++cases;
        }
      const int kv_width = 2 * c.kv_heads() * c.head_dim() / tp.t;
      for (bool shared_qkv : {true, false})
        for (bool backward : {true, false})
          for (int chunk : {0, 1, 7, 50})
            for (const QueryChunks& q : query_chunk_forms(kv_width)) {
              scratch.allocate(d, s.B, s.T, shared_qkv, backward, chunk, tp, q);
              ASSERT_EQ(BlockScratch::bytes_for(d, s.B, s.T, shared_qkv, backward, chunk, tp, q),
                        scratch.bytes())
                  << where << ", " << describe(shared_qkv, backward, chunk, q);
              ++cases;
            }
    }
}

TEST(BlockSizes, Gpt2BytesForMatchesAllocate) {
  for (auto [H, C] : {std::pair{12, 96}, std::pair{5, 40}}) {
    ModelConfig c;
    c.n_layer = 1, c.n_head = H, c.d_model = C, c.vocab_size = 11, c.seq_len = 64;
    int cases = 0;
    check(gpt2_block(), c, cases);
    EXPECT_GT(cases, 0);
  }
}

TEST(BlockSizes, LlamaBytesForMatchesAllocate) {
  // GQA with the K/V heads split over tp (6), replicated when tp exceeds them (2), and MHA (12).
  for (int Hkv : {12, 6, 2}) {
    ModelConfig c;
    c.arch = Arch::llama, c.n_layer = 1, c.n_head = 12, c.n_kv_head = Hkv, c.d_model = 96, c.d_ff = 288;
    c.vocab_size = 11, c.seq_len = 64;
    int cases = 0;
    check(llama_block(), c, cases);
    EXPECT_GT(cases, 0);
  }
}

}  // namespace
}  // namespace odyssey
