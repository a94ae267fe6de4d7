#include "odyssey/model/llama.h"

#include "odyssey/core/error.h"
#include "odyssey/model/block_ops.h"

namespace odyssey {

namespace {

BlockDims llama_dims(const ModelConfig& c, const TpSplit& tp) {
  const int t = tp.t, H = c.n_head, K = c.kv_heads(), F = c.ffn_dim();
  ODY_CHECK(H % t == 0, "model.n_head = {} does not split over parallel.tp = {}", H, t);
  ODY_CHECK(K % t == 0 || t % K == 0,
            "model.n_kv_head = {} and parallel.tp = {}: one must divide the other (key/value heads are split "
            "when tp divides them, replicated when they divide tp)",
            K, t);
  ODY_CHECK(F % t == 0, "model.d_ff = {} does not split over parallel.tp = {}", F, t);
  return {c.d_model, H / t, K % t == 0 ? K / t : 1, c.head_dim(), 2 * F / t, F / t, float(c.rms_norm_eps)};
}

constexpr BlockSpec kLlamaBlock = {kRmsNorm, kSwiGlu, true, "gate_up", "down", llama_dims};

// A Llama-family stage (BlockStage's constructor is for its architectures) over the table of its layers
// `range` and piece tp, after checking the configuration.
ParamTable checked_table(const ModelConfig& c, const StageRange& range, const TpPiece& tp, bool qkv_bias) {
  c.validate();
  validate_llama(c);
  const char* tied = c.tie_embeddings ? "model.embed_tokens.weight" : nullptr;
  const ParamTable table = stage_param_table(llama_param_table(c, qkv_bias), c, range.resolved(c), tied);
  return tp.size > 1 ? table.tensor_parallel(tp.size, tp.rank) : table;
}
struct LlamaStage : BlockStage {
  LlamaStage(const ModelConfig& c, bool allocate_storage, const StageRange& range, const TpPiece& tp,
             bool qkv_bias)
      : BlockStage(kLlamaBlock, c, range.resolved(c), checked_table(c, range, tp, qkv_bias),
                   llama_stage_params, allocate_storage, c.tie_embeddings, tp) {}
};

}  // namespace

const BlockSpec& llama_block() {
  return kLlamaBlock;
}

std::unique_ptr<BlockStage> make_llama_stage(const ModelConfig& config, bool allocate_storage,
                                             const StageRange& range, const TpPiece& tp, bool qkv_bias) {
  return std::make_unique<LlamaStage>(config, allocate_storage, range, tp, qkv_bias);
}

}  // namespace odyssey
