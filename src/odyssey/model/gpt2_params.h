// GPT-2's parameter table and where its stage finds its tensors.
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

#include "odyssey/model/block_stage.h"
#include "odyssey/model/config.h"
#include "odyssey/model/params.h"

namespace odyssey {

// GPT-2's shape rules beyond the common ones (model/config.h), naming the key.
void validate_gpt2(const ModelConfig& config);
ParamTable gpt2_param_table(const ModelConfig& config);
// The GPT-2 tensors of a stage's table (layers `range`), which must outlive the view: wte is the head.
StageParams gpt2_stage_params(const ParamTable& table, const StageRange& range, const ModelConfig& config);

}  // namespace odyssey
