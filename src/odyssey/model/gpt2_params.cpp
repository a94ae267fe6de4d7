#include "odyssey/model/gpt2_params.h"

#include <limits>
#include <string>

#include "odyssey/core/error.h"
#include "odyssey/model/param_index.h"

namespace odyssey {

void validate_gpt2(const ModelConfig& c) {
  // Before 4 * d_model is formed: the MLP's two projections (2 x 4 x d_model) index rows with int.
  ODY_CHECK(c.d_model <= std::numeric_limits<int>::max() / 8,
            "model.d_model ({}): GPT-2's MLP is 4 x d_model wide, and twice that must be at most {}",
            c.d_model, std::numeric_limits<int>::max());
  ODY_CHECK(c.d_model % c.n_head == 0, "model.d_model ({}) must be divisible by model.n_head ({})", c.d_model,
            c.n_head);
  ODY_CHECK(c.n_kv_head == 0 || c.n_kv_head == c.n_head,
            "model.n_kv_head ({}): GPT-2 has as many key/value heads as heads ({})", c.n_kv_head, c.n_head);
  ODY_CHECK(c.d_ff == 0 || c.d_ff == 4 * c.d_model, "model.d_ff ({}): GPT-2's MLP is 4 * d_model ({})",
            c.d_ff, 4 * c.d_model);
  ODY_CHECK(c.head_size == 0 || c.head_size == c.d_model / c.n_head,
            "model.head_dim ({}): GPT-2's heads are d_model / n_head ({})", c.head_size,
            c.d_model / c.n_head);
  ODY_CHECK(!c.rope_scaling.enabled(), "model.rope_scaling: GPT-2 has learned positions, no RoPE");
}

ParamTable gpt2_param_table(const ModelConfig& c) {
  const int64_t C = c.d_model, V = c.vocab_size, T = c.seq_len;
  const int H = c.n_head;
  using Init = ParamInfo::Init;
  // Tensor parallelism (§1.4): c_attn splits its output rows in 3 parts (q, k, v) by heads, c_fc its
  // output rows, the projections their input columns; wte its vocabulary rows; the rest is replicated.
  const TpRule qkv{0, 3, H}, out_rows{0}, in_cols{1}, vocab{.dim = 0, .vocab = true};
  ParamTable t;
  t.add("wte", {V, C}, Init::normal, vocab);
  t.add("wpe", {T, C}, Init::normal);
  for (int l = 0; l < c.n_layer; ++l) {
    t.begin_unit();
    std::string h = "h." + std::to_string(l) + ".";
    t.add(h + "ln_1.weight", {C}, Init::ones);
    t.add(h + "ln_1.bias", {C}, Init::zeros);
    t.add(h + "attn.c_attn.weight", {3 * C, C}, Init::normal, qkv);
    t.add(h + "attn.c_attn.bias", {3 * C}, Init::zeros, qkv);
    t.add(h + "attn.c_proj.weight", {C, C}, Init::normal_residual, TpRule{1, 1, H});
    t.add(h + "attn.c_proj.bias", {C}, Init::zeros);
    t.add(h + "ln_2.weight", {C}, Init::ones);
    t.add(h + "ln_2.bias", {C}, Init::zeros);
    t.add(h + "mlp.c_fc.weight", {4 * C, C}, Init::normal, out_rows);
    t.add(h + "mlp.c_fc.bias", {4 * C}, Init::zeros, out_rows);
    t.add(h + "mlp.c_proj.weight", {C, 4 * C}, Init::normal_residual, in_cols);
    t.add(h + "mlp.c_proj.bias", {C}, Init::zeros);
  }
  t.begin_unit();
  t.add("ln_f.weight", {C}, Init::ones);
  t.add("ln_f.bias", {C}, Init::zeros);
  t.finish();
  return t;
}

StageParams gpt2_stage_params(const ParamTable& t, const StageRange& range, const ModelConfig&) {
  StageParams p;
  p.embed = p.head = t.try_find("wte");
  p.positions = t.try_find("wpe");
  p.norm_w = t.try_find("ln_f.weight");
  p.norm_b = t.try_find("ln_f.bias");
  p.layer_begin = range.layer_begin;
  const ParamIndex index(t);
  for (int l = range.layer_begin; l < range.layer_end; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto at = [&](const char* name) { return &index.find(h + name); };
    p.layers.push_back({at("ln_1.weight"), at("ln_1.bias"), at("attn.c_attn.weight"), at("attn.c_attn.bias"),
                        at("attn.c_proj.weight"), at("attn.c_proj.bias"), at("ln_2.weight"), at("ln_2.bias"),
                        at("mlp.c_fc.weight"), at("mlp.c_fc.bias"), at("mlp.c_proj.weight"),
                        at("mlp.c_proj.bias")});
  }
  return p;
}

}  // namespace odyssey
