#include "odyssey/model/gpt2.h"

#include "odyssey/core/error.h"
#include "odyssey/model/block_ops.h"

namespace odyssey {

namespace {

// Under tensor parallelism over t ranks (tensor-pipeline-parallelism.md §1.4) a rank runs H/t heads and
// 4C/t MLP features; LayerNorm's epsilon is 1e-5.
BlockDims gpt2_dims(const ModelConfig& c, const TpSplit& tp) {
  ODY_CHECK(c.n_head % tp.t == 0, "model.n_head = {} does not split over parallel.tp = {}", c.n_head, tp.t);
  const int H = c.n_head / tp.t, mlp = 4 * c.d_model / tp.t;
  return {c.d_model, H, H, c.d_model / c.n_head, mlp, mlp, 1e-5f};
}

constexpr BlockSpec kGpt2Block = {kLayerNorm, kGelu, false, "fc", "fc_proj", gpt2_dims};

// The configuration is checked before anything is sized from it; the table is cut for the piece.
ParamTable checked_table(const ModelConfig& c, const StageRange& range, const TpPiece& tp) {
  c.validate();
  validate_gpt2(c);
  const ParamTable table = stage_param_table(gpt2_param_table(c), c, range.resolved(c), "wte");
  return tp.size > 1 ? table.tensor_parallel(tp.size, tp.rank) : table;
}

}  // namespace

const BlockSpec& gpt2_block() {
  return kGpt2Block;
}

GPT2::GPT2(const ModelConfig& config, bool allocate_storage, const StageRange& range, const TpPiece& tp)
    : BlockStage(kGpt2Block, config, range.resolved(config), checked_table(config, range, tp),
                 gpt2_stage_params, allocate_storage, true, tp) {}

double training_flops_per_token(const ModelConfig& config, int T) {
  return block_training_flops_per_token(kGpt2Block, config, T);
}

}  // namespace odyssey
