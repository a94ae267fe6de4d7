// The parameter table under tensor parallelism (tensor-pipeline-parallelism.md §1.4, §1.5, §1.8, §1.9):
// each rank's table cuts every tensor by its rule, and initialising a rank's table gives exactly the
// rank's slice of the whole model's initial values (so every layout starts identical). The expected
// slices are computed here independently, element by element from the global tensor.
#include <gtest/gtest.h>

#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/model/params.h"

namespace odyssey {
namespace {

ModelConfig gpt2_config() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 4, c.d_model = 40, c.seq_len = 16, c.vocab_size = 103;
  return c;
}

ModelConfig llama_config(int kv_heads, bool tied) {
  ModelConfig c;
  c.arch = Arch::llama, c.n_layer = 2, c.n_head = 4, c.n_kv_head = kv_heads, c.d_model = 36, c.head_size = 10;
  c.d_ff = 52, c.seq_len = 16, c.vocab_size = 103, c.tie_embeddings = tied;
  return c;
}

// Rank r's expected piece of a global tensor (1-D or 2-D), by the rule's definition.
std::vector<float> expected_piece(const float* global, const ParamInfo& p, int t, int r) {
  const std::vector<int64_t> shape = p.shape;
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  if (p.tp.dim < 0 || t == 1) return std::vector<float>(global, global + rows * cols);
  const int dim = p.tp.dim;
  const int64_t extent = shape[size_t(dim)];
  int64_t part = extent / p.tp.parts, piece = part / t, first = r * piece;
  if (p.tp.vocab) part = (extent + t - 1) / t * t, piece = part / t, first = r * piece;
  if (p.tp.kv && t > p.tp.heads) piece = extent / p.tp.heads, first = (r / (t / p.tp.heads)) * piece;
  // Local index j along the cut dimension -> global index (or -1: padding).
  auto global_index = [&](int64_t j) -> int64_t {
    const int64_t s = j / piece, g = s * part + first + j % piece;
    return g < extent ? g : -1;
  };
  const int64_t local_extent = piece * p.tp.parts;
  std::vector<float> out;
  if (dim == 0) {
    for (int64_t j = 0; j < local_extent; ++j)
      for (int64_t c = 0; c < cols; ++c)
        out.push_back(global_index(j) < 0 ? 0.0f : global[global_index(j) * cols + c]);
  } else {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < local_extent; ++j) out.push_back(global[i * cols + global_index(j)]);
  }
  return out;
}

void check_slices(const ModelConfig& config) {
  const ParamTable whole(config);
  std::vector<float> all(size_t(whole.total()));
  init_parameters(all.data(), whole, config, 1234);
  for (int t : {1, 2, 4}) {
    int64_t sum = 0;
    for (int r = 0; r < t; ++r) {
      const ParamTable mine = whole.tensor_parallel(t, r);
      ASSERT_EQ(mine.num_units(), whole.num_units());
      std::vector<float> local(size_t(mine.total()), -7.0f);
      init_parameters(local.data(), mine, config, 1234);
      for (const ParamInfo& p : mine.tensors()) {
        const ParamInfo& g = whole.find(p.name);
        EXPECT_EQ(p.index, g.index);
        EXPECT_EQ(p.unit, g.unit) << p.name;
        const std::vector<float> want = expected_piece(all.data() + g.offset, g, t, r);
        ASSERT_EQ(size_t(p.numel), want.size()) << p.name << " t=" << t;
        const std::vector<float> got(local.begin() + p.offset, local.begin() + p.offset + p.numel);
        EXPECT_EQ(got, want) << p.name << " at tp " << t << " rank " << r;
      }
      sum += mine.total();
    }
    if (t == 1)
      EXPECT_EQ(sum, whole.total());
    else
      EXPECT_LT(sum, whole.total() * t) << "split tensors are not replicated";
  }
}

TEST(TensorParallelParams, Gpt2SlicesOfTheWholeInit) {
  check_slices(gpt2_config());
}
TEST(TensorParallelParams, LlamaGqaSlicesOfTheWholeInit) {
  check_slices(llama_config(2, false));
}
TEST(TensorParallelParams, LlamaMqaTiedSlicesOfTheWholeInit) {
  check_slices(llama_config(1, true));
}

TEST(TensorParallelParams, ShapesFollowTheRules) {
  const ParamTable t4 = ParamTable(llama_config(2, false)).tensor_parallel(4, 3);
  EXPECT_EQ(t4.find("model.layers.0.self_attn.q_proj.weight").local_shape(), (std::vector<int64_t>{10, 36}));
  EXPECT_EQ(t4.find("model.layers.0.self_attn.k_proj.weight").local_shape(), (std::vector<int64_t>{10, 36}));
  EXPECT_EQ(t4.find("model.layers.0.self_attn.k_proj.weight").shard.index, 1);  // head 3 / (4 / 2)
  EXPECT_EQ(t4.find("model.layers.0.self_attn.o_proj.weight").local_shape(), (std::vector<int64_t>{36, 10}));
  EXPECT_EQ(t4.find("model.layers.0.mlp.down_proj.weight").local_shape(), (std::vector<int64_t>{36, 13}));
  EXPECT_EQ(t4.find("model.norm.weight").local_shape(), (std::vector<int64_t>{36}));
  EXPECT_EQ(t4.find("lm_head.weight").local_shape(), (std::vector<int64_t>{26, 36}));  // 103 padded to 104
  const ParamTable g2 = ParamTable(gpt2_config()).tensor_parallel(2, 0);
  EXPECT_EQ(g2.find("h.0.attn.c_attn.weight").local_shape(), (std::vector<int64_t>{60, 40}));
  EXPECT_EQ(g2.find("h.0.attn.c_attn.bias").local_shape(), (std::vector<int64_t>{60}));
  EXPECT_EQ(g2.find("wpe").local_shape(), (std::vector<int64_t>{16, 40}));
  EXPECT_TRUE(g2.find("h.0.attn.c_proj.bias").shard.whole());
}

TEST(TensorParallelParams, LayoutsThatDoNotSplitAreNamed) {
  ModelConfig c = gpt2_config();
  c.n_head = 5;  // 5 heads of 8
  try {
    ParamTable(c).tensor_parallel(2, 0);
    FAIL() << "5 heads split over 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp = 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c_attn"), std::string::npos) << e.what();
  }
  ModelConfig l = llama_config(2, false);
  l.n_head = 6, l.n_kv_head = 3, l.d_model = 60, l.d_ff = 48;
  EXPECT_THROW(ParamTable(l).tensor_parallel(2, 0), Error);  // 3 kv heads over 2
  EXPECT_THROW(ParamTable(l).tensor_parallel(4, 0), Error);  // 6 heads over 4
  EXPECT_NO_THROW(ParamTable(l).tensor_parallel(3, 2));
  EXPECT_NO_THROW(ParamTable(l).tensor_parallel(6, 5));  // one kv head on 2 ranks each
}

}  // namespace
}  // namespace odyssey
