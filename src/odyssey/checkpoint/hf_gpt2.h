// Hugging Face GPT-2 (GPT2LMHeadModel) import and export.
//
// Names: our "wte" / "wpe" are "transformer.wte.weight" / "transformer.wpe.weight"; every other
// tensor is "transformer." + our name ("h.3.attn.c_attn.weight", "ln_f.bias", ...). HF's GPT-2
// uses Conv1D, which stores weights [in, out], where we store [out, in] (nn.Linear): the four
// matrices per layer (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are transposed both ways.
//
// The LM head is tied to wte. Export omits "lm_head.weight", as transformers' save_pretrained does
// for tied weights (safetensors cannot hold shared tensors; loading re-ties the head from wte).
// Import accepts, besides the "transformer."-prefixed names that save_pretrained writes, the
// unprefixed names of the original hub files ("h.0.attn.c_attn.weight", "wte.weight"); it ignores
// the causal-mask buffers "h.N.attn.bias" / "h.N.attn.masked_bias" that older checkpoints carry,
// and checks that an "lm_head.weight", if present, equals wte (or uses it when wte is absent).
#pragma once

#include <string>
#include <vector>

#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/model/config.h"
#include "odyssey/model/params.h"

namespace odyssey {

// Our parameter name -> HF name ("wte" -> "transformer.wte.weight").
std::string hf_gpt2_name(const std::string& name);
// True for the Conv1D weights that HF stores transposed.
bool hf_gpt2_is_conv1d(const std::string& name);
// The tensor's shape as HF stores it.
std::vector<int64_t> hf_gpt2_shape(const ParamInfo& p);
// Copies tensor p from our flat buffer into out (p.numel floats) in HF's layout, and back.
void hf_gpt2_to_hf_layout(const ParamInfo& p, const float* params, float* out);
void hf_gpt2_from_hf_layout(const ParamInfo& p, const float* in, float* params);

// config.json for GPT2LMHeadModel with these sizes (keys sorted, as transformers writes them).
// Dropouts are 0 since Odyssey trains without dropout.
std::string hf_gpt2_config_json(const ModelConfig& config);

// Writes out_dir/model.safetensors (F32, __metadata__ {"format": "pt"}) and out_dir/config.json,
// each atomically; creates out_dir if needed.
void export_hf_gpt2(const ModelConfig& config, const float* params, const std::string& out_dir);

// Reads dir/config.json; fails naming the file and key when a field is missing or describes a
// model we do not compute exactly (other activation, epsilon, untied head, n_inner != 4 n_embd...).
ModelConfig read_hf_gpt2_config(const std::string& dir);

// Reads dir/model.safetensors into params (ParamTable(config).total() floats). Fails listing every
// missing tensor, shape mismatch and unknown tensor by name; params is untouched when it fails.
void import_hf_gpt2(const std::string& dir, const ModelConfig& config, float* params);

// The same from an open file, for tensors stored under prefix + HF name (e.g. "grad." or
// "after_step." in test references). With strict, tensors that are neither ours, nor ignorable
// buffers, nor lm_head are errors; without it, other tensors are left alone.
void read_hf_gpt2_tensors(const SafetensorsFile& file, const ModelConfig& config, float* params,
                          const std::string& prefix = "", bool strict = true);

}  // namespace odyssey
