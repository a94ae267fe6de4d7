// Llama, exactly as Hugging Face's LlamaForCausalLM (tensor-pipeline-parallelism.md §5): token
// embedding, RMSNorm, rotate-half RoPE (optionally with Llama-3 frequency scaling) at each token's
// global position, grouped-query attention, SwiGLU, no biases, a tied or untied LM head. Llama is its
// block description (llama_block()), its parameter table (llama_params.h) and the stage over them, a
// block stage (model/block_stage.h): the whole model or a range of its layers.
#pragma once

#include <memory>

#include "odyssey/model/block_stage.h"
#include "odyssey/model/llama_params.h"

namespace odyssey {

// Llama's block: RMSNorm, RoPE on q and k, SwiGLU, no biases of its own (a table may add q, k, v ones:
// Qwen2). Under tensor parallelism over t ranks (§1.8) a rank runs H/t query heads, F/t MLP features and
// K/t key/value heads, or, when t exceeds the key/value heads, the one its query heads read (replicated
// on t/K ranks); its dims fail naming model.n_head, model.n_kv_head or model.d_ff when the model does
// not split over tp.
const BlockSpec& llama_block();

// A stage of a Llama-family model holding layers `range` (default: all) of the tensor-parallel piece tp
// (default: whole tensors), over Llama's table, or with qkv_bias Qwen2's (q, k, v biases); the
// configuration is checked first. allocate_storage as Stage::owns_storage.
std::unique_ptr<BlockStage> make_llama_stage(const ModelConfig& config, bool allocate_storage = true,
                                             const StageRange& range = {}, const TpPiece& tp = {},
                                             bool qkv_bias = false);

}  // namespace odyssey
