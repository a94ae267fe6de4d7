// Llama's parameter table (Hugging Face names, spec §5.4) and a named view of it. H heads, K
// key/value heads of D dims, MLP width F:
//   unit 0:     model.embed_tokens.weight [V, C]
//   unit 1 + l: model.layers.l.input_layernorm.weight [C],
//               model.layers.l.self_attn.{q_proj [H*D, C], k_proj [K*D, C], v_proj [K*D, C]}.weight,
//               model.layers.l.self_attn.o_proj.weight [C, H*D],
//               model.layers.l.post_attention_layernorm.weight [C],
//               model.layers.l.mlp.{gate_proj [F, C], up_proj [F, C]}.weight,
//               model.layers.l.mlp.down_proj.weight [C, F]
//   unit L + 1: model.norm.weight [C], lm_head.weight [V, C] (untied only)
// q, k, v are adjacent, so they are one [(H + 2K)*D, C] matrix (one GEMM gives the fused qkv the
// attention op takes); gate and up likewise are one [2F, C] matrix. No biases.
#pragma once

#include <vector>

#include "odyssey/model/config.h"
#include "odyssey/model/params.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// Llama's shape rules beyond the common ones (model/config.h), naming the key.
void validate_llama(const ModelConfig& config);
ParamTable llama_param_table(const ModelConfig& config);
// The table of a pipeline stage holding layers `range` (resolved), as gpt2_stage_table: a last stage
// without the embeddings holds its own copy of the embedding for a tied head.
ParamTable llama_stage_table(const ModelConfig& config, const StageRange& range);

struct LlamaLayerParams {
  const ParamInfo *attn_norm, *q, *k, *v, *o, *mlp_norm, *gate, *up, *down;
};

// The Llama tensors of a (stage's) table, which must outlive the view; absent ones are null. lm_head is
// the embedding when tied.
struct LlamaParams {
  LlamaParams(const ParamTable& table, const StageRange& range, const ModelConfig& config);
  const ParamInfo *embed, *norm, *lm_head;
  int layer_begin;
  std::vector<LlamaLayerParams> layers;
  const LlamaLayerParams& layer(int l) const { return layers[size_t(l - layer_begin)]; }
};

}  // namespace odyssey
