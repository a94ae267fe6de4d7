// GPT-2's parameter table and a named view of it.
//
// Order (per-layer contiguous, so a layer is one range for ZeRO-3 gathers):
//   unit 0:     wte [V, C], wpe [maxT, C]       (wte is also the tied LM head)
//   unit 1 + l: h.l.ln_1.weight [C], h.l.ln_1.bias [C],
//               h.l.attn.c_attn.weight [3C, C], h.l.attn.c_attn.bias [3C],
//               h.l.attn.c_proj.weight [C, C], h.l.attn.c_proj.bias [C],
//               h.l.ln_2.weight [C], h.l.ln_2.bias [C],
//               h.l.mlp.c_fc.weight [4C, C], h.l.mlp.c_fc.bias [4C],
//               h.l.mlp.c_proj.weight [C, 4C], h.l.mlp.c_proj.bias [C],
//   unit L + 1: ln_f.weight [C], ln_f.bias [C].
// Linear weights are [out, in] (nn.Linear); Hugging Face's Conv1D stores [in, out]: export and
// import transpose.
#pragma once

#include <vector>

#include "odyssey/model/config.h"
#include "odyssey/model/params.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// GPT-2's shape rules beyond the common ones (model/config.h), naming the key.
void validate_gpt2(const ModelConfig& config);
ParamTable gpt2_param_table(const ModelConfig& config);
// The table of a pipeline stage holding layers `range` (resolved): the whole table's units of those
// layers, the embeddings' unit first when it has them, and the final norm's unit last when it has the
// head; that unit then also holds the tied head's wte unless the stage has the embeddings.
ParamTable gpt2_stage_table(const ModelConfig& config, const StageRange& range);

// One layer's tensors, found by name.
struct LayerParams {
  const ParamInfo *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
      *fc_proj_w, *fc_proj_b;
};

// The GPT-2 tensors of a (stage's) table, which must outlive the view. Absent tensors are null: wpe
// without the embeddings, ln_f without the head, wte without either.
struct Gpt2Params {
  Gpt2Params(const ParamTable& table, const StageRange& range);
  const ParamInfo *wte, *wpe, *lnf_w, *lnf_b;
  int layer_begin;
  std::vector<LayerParams> layers;
  const LayerParams& layer(int l) const { return layers[size_t(l - layer_begin)]; }
};

}  // namespace odyssey
