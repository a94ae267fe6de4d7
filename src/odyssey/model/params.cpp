#include "odyssey/model/params.h"

#include <algorithm>

#include <cmath>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"
#include "odyssey/model/architecture.h"

namespace odyssey {

int64_t ModelConfig::num_parameters() const {
  return ParamTable(*this).total();
}

ParamTable::ParamTable(const ModelConfig& config)
    : ParamTable(architecture(config.arch).make_table(config)) {}

std::vector<int64_t> ParamInfo::local_shape() const {
  std::vector<int64_t> s = shape;
  if (!shard.whole()) s[size_t(shard.dim)] /= shard.count;
  return s;
}

void ParamTable::add(std::string name, std::vector<int64_t> shape, ParamInfo::Init init) {
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.index = int(tensors_.size());
  p.init = init;
  p.weight_decay = p.shape.size() >= 2;
  append(p);
}

void ParamTable::append(const ParamInfo& like) {
  ParamInfo p = like;
  ODY_CHECK(p.shard.whole() || (p.shard.dim < int(p.shape.size()) && p.shard.count > 0 &&
                                p.shape[size_t(p.shard.dim)] % p.shard.count == 0 && p.shard.index >= 0 &&
                                p.shard.index < p.shard.count),
            "parameter {}: shard {}/{} of dimension {} does not divide its shape", p.name, p.shard.index,
            p.shard.count, p.shard.dim);
  p.unit = unit_;
  p.numel = 1;
  for (int64_t d : p.local_shape()) p.numel *= d;
  p.offset = total_;
  total_ += p.numel;
  tensors_.push_back(std::move(p));
}

ParamTable ParamTable::units(int first, int last) const {
  ODY_CHECK(first >= 0 && first <= last && last < num_units(), "units [{}, {}] outside the model's {} units",
            first, last, num_units());
  ParamTable t;
  for (int u = first; u <= last; ++u) {
    if (u > first) t.begin_unit();
    for (const ParamInfo& p : tensors_)
      if (p.unit == u) t.append(p);
  }
  return t;
}

void ParamTable::begin_unit() {
  unit_begin_.push_back(total_);
  ++unit_;
}

void ParamTable::finish() {
  unit_begin_.push_back(total_);
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

void init_parameter_range(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed,
                          int64_t begin, int64_t end) {
  const float std = 0.02f;
  const float residual_std = std / std::sqrt(2.0f * float(config.n_layer));
  for (const ParamInfo& p : table.tensors()) {
    ODY_CHECK(p.shard.whole(), "init: parameter {} is a shard; sharded initialisation is not supported",
              p.name);
    const uint64_t t = uint64_t(p.index);
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
