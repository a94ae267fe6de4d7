// Llama's parameter table (Hugging Face names, spec §5.4) and where its stage finds its tensors. H
// heads, K key/value heads of D dims, MLP width F:
//   unit 0:     model.embed_tokens.weight [V, C]
//   unit 1 + l: model.layers.l.input_layernorm.weight [C],
//               model.layers.l.self_attn.{q_proj [H*D, C], k_proj [K*D, C], v_proj [K*D, C]}.weight,
//               (qkv_bias: model.layers.l.self_attn.{q_proj [H*D], k_proj [K*D], v_proj [K*D]}.bias)
//               model.layers.l.self_attn.o_proj.weight [C, H*D],
//               model.layers.l.post_attention_layernorm.weight [C],
//               model.layers.l.mlp.{gate_proj [F, C], up_proj [F, C]}.weight,
//               model.layers.l.mlp.down_proj.weight [C, F]
//   unit L + 1: model.norm.weight [C], lm_head.weight [V, C] (untied only)
// q, k, v are adjacent, so they are one [(H + 2K)*D, C] matrix (one GEMM gives the fused qkv the
// attention op takes), and their biases one [(H + 2K)*D] vector; gate and up likewise are one [2F, C]
// matrix. No other biases. Qwen2 (qwen2.h) is this table with qkv_bias.
#pragma once

#include "odyssey/model/block_stage.h"
#include "odyssey/model/config.h"
#include "odyssey/model/params.h"

namespace odyssey {

// Llama's shape rules beyond the common ones (model/config.h), naming the key.
void validate_llama(const ModelConfig& config);
ParamTable llama_param_table(const ModelConfig& config, bool qkv_bias = false);
// The tensors of a stage's table (layers `range`), which must outlive the view; the head is the
// embedding when tied.
StageParams llama_stage_params(const ParamTable& table, const StageRange& range, const ModelConfig& config);

}  // namespace odyssey
