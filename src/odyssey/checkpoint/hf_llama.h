// Hugging Face Llama (LlamaForCausalLM) and Qwen2 (Qwen2ForCausalLM: Llama's with q, k, v biases)
// import and export (tensor-pipeline-parallelism.md §5.1, §5.4).
//
// Our parameter names are Hugging Face's ("model.embed_tokens.weight",
// "model.layers.3.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight"), every matrix
// [out, in] as nn.Linear stores it, so tensors map one to one without transposes. RoPE is rotate-half
// in both. A tied model has no "lm_head.weight" (save_pretrained omits it; import also accepts one
// equal to the embedding). Import reads model.safetensors or model.safetensors.index.json with its
// shards, F32/F16/BF16/F64, ignores "rotary_emb.inv_freq" buffers, and refuses by key what we do not
// compute exactly: biases (beyond Qwen2's on q, k, v), another activation, another rope type, sliding
// windows. Qwen2's names are Llama's plus "model.layers.N.self_attn.{q,k,v}_proj.bias".
#pragma once

#include <string>

#include "odyssey/model/config.h"

namespace odyssey {

// The Llama family: model.arch = "llama" (LlamaForCausalLM) or "qwen2" (Qwen2ForCausalLM); config.arch
// picks it where a configuration is given.
//
// config.json for this configuration (keys sorted).
std::string hf_llama_config_json(const ModelConfig& config);
// Writes out_dir/model.safetensors (F32) and out_dir/config.json, each atomically.
void export_hf_llama(const ModelConfig& config, const float* params, const std::string& out_dir);
// Reads dir/config.json of a Llama (model_type "llama") or a Qwen2 (model_type "qwen2"); fails naming the
// file and the key.
ModelConfig read_hf_llama_config(const std::string& dir);
ModelConfig read_hf_qwen2_config(const std::string& dir);
// Reads the weights into params (the whole model's table); lists every missing, misshapen or unknown
// tensor by name; params is untouched when it fails.
void import_hf_llama(const std::string& dir, const ModelConfig& config, float* params);

}  // namespace odyssey
