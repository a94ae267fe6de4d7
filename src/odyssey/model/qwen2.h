// Qwen2, exactly as Hugging Face's Qwen2ForCausalLM: Llama's block (RMSNorm, RoPE at rope_theta,
// grouped-query attention, SwiGLU, a tied or untied head) with biases on the q, k and v projections.
// Qwen2 is Llama's block description (llama_block()) over Llama's parameter table with those biases
// (llama_params.h: model.layers.l.self_attn.{q,k,v}_proj.bias), and its registry entry.
#pragma once

#include <memory>

#include "odyssey/model/llama.h"

namespace odyssey {

ParamTable qwen2_param_table(const ModelConfig& config);
// A stage holding layers `range` of the tensor-parallel piece tp (as make_llama_stage).
std::unique_ptr<BlockStage> make_qwen2_stage(const ModelConfig& config, bool allocate_storage = true,
                                             const StageRange& range = {}, const TpPiece& tp = {});

}  // namespace odyssey
