#include "odyssey/model/llama_params.h"

#include <string>

#include "odyssey/core/error.h"
#include "odyssey/model/param_index.h"

namespace odyssey {

void validate_llama(const ModelConfig& c) {
  ODY_CHECK(c.n_kv_head >= 0, "model.n_kv_head must be positive (or 0: n_head), got {}", c.n_kv_head);
  ODY_CHECK(c.n_head % c.kv_heads() == 0, "model.n_head ({}) must be a multiple of model.n_kv_head ({})",
            c.n_head, c.kv_heads());
  ODY_CHECK(c.head_size >= 0, "model.head_dim must be positive (or 0: d_model / n_head), got {}",
            c.head_size);
  ODY_CHECK(c.head_size > 0 || c.d_model % c.n_head == 0,
            "model.d_model ({}) must be divisible by model.n_head ({}) unless model.head_dim is set",
            c.d_model, c.n_head);
  ODY_CHECK(c.head_dim() % 2 == 0, "model.head_dim ({}) must be even (RoPE rotates pairs)", c.head_dim());
  ODY_CHECK(c.d_ff > 0, "model.d_ff must be set to a positive MLP width for llama, got {}", c.d_ff);
  ODY_CHECK(c.rms_norm_eps > 0, "model.rms_norm_eps must be positive, got {}", c.rms_norm_eps);
  ODY_CHECK(c.rope_theta > 1, "model.rope_theta must be > 1, got {}", c.rope_theta);
  const RopeScaling& r = c.rope_scaling;
  if (!r.enabled()) return;
  ODY_CHECK(r.factor >= 1, "model.rope_scaling.factor must be >= 1, got {}", r.factor);
  ODY_CHECK(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor,
            "model.rope_scaling: need 0 < low_freq_factor ({}) < high_freq_factor ({})", r.low_freq_factor,
            r.high_freq_factor);
  ODY_CHECK(r.original_max_position_embeddings > 0,
            "model.rope_scaling.original_max_position_embeddings must be positive, got {}",
            r.original_max_position_embeddings);
}

ParamTable llama_param_table(const ModelConfig& c, bool qkv_bias) {
  const int64_t C = c.d_model, V = c.vocab_size, D = c.head_dim(), H = c.n_head, K = c.kv_heads(),
                F = c.ffn_dim();
  using Init = ParamInfo::Init;  // Hugging Face: normal(0, 0.02) for every matrix, norms one
  // Tensor parallelism (§1.4, §1.8): q, k, v by heads (k, v replicated when tp exceeds their heads),
  // o_proj by its input heads, gate and up by output rows, down by input columns; embeddings and
  // lm_head by vocabulary rows; norms replicated.
  const TpRule q_rule{0, 1, int(H)}, kv_rule{0, 1, int(K), true}, o_rule{1, 1, int(H)}, out_rows{0},
      in_cols{1}, vocab{.dim = 0, .vocab = true};
  ParamTable t;
  t.add("model.embed_tokens.weight", {V, C}, Init::normal, vocab);
  for (int l = 0; l < c.n_layer; ++l) {
    t.begin_unit();
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {C}, Init::ones);
    t.add(p + "self_attn.q_proj.weight", {H * D, C}, Init::normal, q_rule);
    t.add(p + "self_attn.k_proj.weight", {K * D, C}, Init::normal, kv_rule);
    t.add(p + "self_attn.v_proj.weight", {K * D, C}, Init::normal, kv_rule);
    if (qkv_bias) {
      t.add(p + "self_attn.q_proj.bias", {H * D}, Init::zeros, q_rule);
      t.add(p + "self_attn.k_proj.bias", {K * D}, Init::zeros, kv_rule);
      t.add(p + "self_attn.v_proj.bias", {K * D}, Init::zeros, kv_rule);
    }
    t.add(p + "self_attn.o_proj.weight", {C, H * D}, Init::normal, o_rule);
    t.add(p + "post_attention_layernorm.weight", {C}, Init::ones);
    t.add(p + "mlp.gate_proj.weight", {F, C}, Init::normal, out_rows);
    t.add(p + "mlp.up_proj.weight", {F, C}, Init::normal, out_rows);
    t.add(p + "mlp.down_proj.weight", {C, F}, Init::normal, in_cols);
  }
  t.begin_unit();
  t.add("model.norm.weight", {C}, Init::ones);
  if (!c.tie_embeddings) t.add("lm_head.weight", {V, C}, Init::normal, vocab);
  t.finish();
  return t;
}

StageParams llama_stage_params(const ParamTable& t, const StageRange& range, const ModelConfig& config) {
  StageParams p;
  p.embed = t.try_find("model.embed_tokens.weight");
  p.norm_w = t.try_find("model.norm.weight");
  p.head = config.tie_embeddings ? p.embed : t.try_find("lm_head.weight");
  p.layer_begin = range.layer_begin;
  // One GEMM reads q|k|v (and one add their biases) and one gate|up: they must be adjacent in the buffer.
  auto adjacent = [](const ParamInfo* a, const ParamInfo* b) {
    ODY_CHECK(b->offset == a->offset + a->numel && b->unit == a->unit,
              "parameter table: {} does not follow {}", b->name, a->name);
  };
  const ParamIndex index(t);
  for (int l = range.layer_begin; l < range.layer_end; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    auto at = [&](const char* name) { return &index.find(pre + name); };
    BlockParamInfos b;
    b.norm1_w = at("input_layernorm.weight");
    b.qkv_w = at("self_attn.q_proj.weight");
    adjacent(b.qkv_w, at("self_attn.k_proj.weight")),
        adjacent(at("self_attn.k_proj.weight"), at("self_attn.v_proj.weight"));
    b.qkv_b = index.try_find(pre + "self_attn.q_proj.bias");
    if (b.qkv_b)
      adjacent(b.qkv_b, at("self_attn.k_proj.bias")),
          adjacent(at("self_attn.k_proj.bias"), at("self_attn.v_proj.bias"));
    b.proj_w = at("self_attn.o_proj.weight");
    b.norm2_w = at("post_attention_layernorm.weight");
    b.up_w = at("mlp.gate_proj.weight");
    adjacent(b.up_w, at("mlp.up_proj.weight"));
    b.down_w = at("mlp.down_proj.weight");
    p.layers.push_back(b);
  }
  return p;
}

}  // namespace odyssey
