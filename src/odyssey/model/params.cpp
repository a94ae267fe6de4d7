#include "odyssey/model/params.h"

#include <algorithm>

#include <cmath>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"

namespace odyssey {

void ModelConfig::validate() const {
  ODY_CHECK(arch == "gpt2", "model.arch: unknown architecture '{}' (supported: gpt2)", arch);
  ODY_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  ODY_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  ODY_CHECK(d_model > 0, "model.d_model must be positive, got {}", d_model);
  ODY_CHECK(d_model % n_head == 0, "model.d_model ({}) must be divisible by model.n_head ({})", d_model,
            n_head);
  ODY_CHECK(seq_len > 0, "model.seq_len must be positive, got {}", seq_len);
  // No upper bound: the token-shard format carries the width (uint32 shards above 65,536 ids).
  ODY_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
}

int64_t ModelConfig::num_parameters() const {
  return ParamTable(*this).total();
}

ParamTable::ParamTable(const ModelConfig& c) {
  const int64_t C = c.d_model, V = c.vocab_size, T = c.seq_len;
  using Init = ParamInfo::Init;
  int unit = 0;
  unit_begin_.push_back(0);
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init) {
    ParamInfo p;
    p.unit = unit;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = total_;
    p.init = init;
    p.weight_decay = p.shape.size() >= 2;
    total_ += p.numel;
    tensors_.push_back(std::move(p));
  };
  add("wte", {V, C}, Init::normal);
  add("wpe", {T, C}, Init::normal);
  for (int l = 0; l < c.n_layer; ++l) {
    unit_begin_.push_back(total_);
    unit = layer_unit(l);
    std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, Init::ones);
    add(h + "ln_1.bias", {C}, Init::zeros);
    add(h + "attn.c_attn.weight", {3 * C, C}, Init::normal);
    add(h + "attn.c_attn.bias", {3 * C}, Init::zeros);
    add(h + "attn.c_proj.weight", {C, C}, Init::normal_residual);
    add(h + "attn.c_proj.bias", {C}, Init::zeros);
    add(h + "ln_2.weight", {C}, Init::ones);
    add(h + "ln_2.bias", {C}, Init::zeros);
    add(h + "mlp.c_fc.weight", {4 * C, C}, Init::normal);
    add(h + "mlp.c_fc.bias", {4 * C}, Init::zeros);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, Init::normal_residual);
    add(h + "mlp.c_proj.bias", {C}, Init::zeros);
  }
  unit_begin_.push_back(total_);
  unit = c.n_layer + 1;
  add("ln_f.weight", {C}, Init::ones);
  add("ln_f.bias", {C}, Init::zeros);
  unit_begin_.push_back(total_);
  // Pointers are taken once the vector no longer grows, by name (not by position in the table).
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto at = [&](const char* name) { return &find(h + name); };
    layers_.push_back({at("ln_1.weight"), at("ln_1.bias"), at("attn.c_attn.weight"), at("attn.c_attn.bias"),
                       at("attn.c_proj.weight"), at("attn.c_proj.bias"), at("ln_2.weight"), at("ln_2.bias"),
                       at("mlp.c_fc.weight"), at("mlp.c_fc.bias"), at("mlp.c_proj.weight"),
                       at("mlp.c_proj.bias")});
  }
}

const ParamInfo* ParamTable::try_find(const std::string& name) const {
  for (const auto& p : tensors_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  const ParamInfo* p = try_find(name);
  ODY_CHECK(p, "no parameter named '{}' in the model", name);
  return *p;
}

std::pair<int64_t, int64_t> ParamTable::layer_range(int l) const {
  const LayerParams& lp = layers_[size_t(l)];
  return {lp.ln1_w->offset, lp.fc_proj_b->offset + lp.fc_proj_b->numel};
}

void init_parameter_range(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed,
                          int64_t begin, int64_t end) {
  const float std = 0.02f;
  const float residual_std = std / std::sqrt(2.0f * float(config.n_layer));
  for (size_t t = 0; t < table.tensors().size(); ++t) {
    const ParamInfo& p = table.tensors()[t];
    // Elements [b, e) of tensor t lie in the range.
    const int64_t b = std::max<int64_t>(begin - p.offset, 0), e = std::min<int64_t>(end - p.offset, p.numel);
    if (b >= e) continue;
    float* x = params + p.offset + b;
    const size_t n = size_t(e - b);
    switch (p.init) {
      case ParamInfo::Init::normal:
        philox_fill_normal(x, n, 0.0f, std, seed, t, uint64_t(b));
        break;
      case ParamInfo::Init::normal_residual:
        philox_fill_normal(x, n, 0.0f, residual_std, seed, t, uint64_t(b));
        break;
      case ParamInfo::Init::zeros:
        std::fill(x, x + n, 0.0f);
        break;
      case ParamInfo::Init::ones:
        std::fill(x, x + n, 1.0f);
        break;
    }
  }
}

void init_parameters(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed) {
  init_parameter_range(params, table, config, seed, 0, table.total());
}

}  // namespace odyssey
