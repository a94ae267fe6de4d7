#include "odyssey/model/params.h"

#include <algorithm>

#include <cmath>

#include "odyssey/core/checked_int.h"
#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"
#include "odyssey/model/architecture.h"

namespace odyssey {

int64_t ModelConfig::num_parameters() const {
  // Every layer holds the same tensors: a one- and a two-layer model give the count without a table of
  // n_layer layers (work proportional to a key, before the memory check that may refuse it).
  ModelConfig one = *this, two = *this;
  one.n_layer = 1, two.n_layer = 2;
  const int64_t base = ParamTable(one).total(), per_layer = ParamTable(two).total() - base;
  return checked_add(base, checked_mul(per_layer, n_layer - 1, "model.n_layer x the parameters of a layer"),
                     "the model's parameters");
}

ParamTable::ParamTable(const ModelConfig& config)
    : ParamTable(architecture(config.arch).make_table(config)) {}

std::vector<int64_t> ParamInfo::local_shape() const {
  std::vector<int64_t> s = shape;
  if (!shard.whole())
    s[size_t(shard.dim)] = (shard.padded ? shard.padded : s[size_t(shard.dim)]) / shard.count;
  return s;
}

void ParamTable::add(std::string name, std::vector<int64_t> shape, ParamInfo::Init init, TpRule tp) {
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.index = int(tensors_.size());
  p.init = init;
  p.tp = tp;
  p.weight_decay = p.shape.size() >= 2;
  append(p);
}

void ParamTable::append(const ParamInfo& like) {
  ParamInfo p = like;
  const TensorShard& s = p.shard;
  const int64_t extent = s.whole() ? 0 : (s.padded ? s.padded : p.shape[size_t(s.dim)]);
  ODY_CHECK(s.whole() || (s.dim < int(p.shape.size()) && s.count > 0 && s.parts > 0 && s.index >= 0 &&
                          s.index < s.count && extent % (int64_t(s.parts) * s.count) == 0 &&
                          (s.padded == 0 || (s.parts == 1 && s.padded >= p.shape[size_t(s.dim)]))),
            "parameter {}: shard {}/{} ({} parts) of dimension {} does not divide its shape", p.name, s.index,
            s.count, s.parts, s.dim);
  p.unit = unit_;
  p.numel = 1;
  for (int64_t d : p.local_shape()) p.numel = checked_mul(p.numel, d, p.name);
  p.offset = total_;
  total_ = checked_add(total_, p.numel, "the model's parameters");
  tensors_.push_back(std::move(p));
}

ParamTable ParamTable::units(int first, int last) const {
  ODY_CHECK(first >= 0 && first <= last && last < num_units(), "units [{}, {}] outside the model's {} units",
            first, last, num_units());
  // One pass: the tensors are in unit order (a table appends to its last unit only).
  ParamTable t;
  int u = first;
  for (const ParamInfo& p : tensors_) {
    if (p.unit < first || p.unit > last) continue;
    for (; u < p.unit; ++u) t.begin_unit();
    t.append(p);
  }
  for (; u < last; ++u) t.begin_unit();
  return t;
}

ParamTable ParamTable::tensor_parallel(int t, int r) const {
  ODY_CHECK(t >= 1 && r >= 0 && r < t, "tensor parallelism: rank {} of {}", r, t);
  ParamTable out;
  int u = 0;  // one pass, as units() does
  for (ParamInfo p : tensors_) {
    for (; u < p.unit; ++u) out.begin_unit();
    const TpRule& rule = p.tp;
    if (t > 1 && rule.dim >= 0) {
      const int64_t extent = p.shape[size_t(rule.dim)];
      TensorShard s{rule.dim, r, t, rule.parts, 0};
      if (rule.vocab) {
        s.padded = (extent + t - 1) / t * t;
      } else if (rule.kv && t > rule.heads) {
        ODY_CHECK(t % rule.heads == 0,
                  "parameter {}: model.n_kv_head = {} and parallel.tp = {} must divide one another", p.name,
                  rule.heads, t);
        s.index = r / (t / rule.heads), s.count = rule.heads;  // one head, on t / heads ranks
      } else {
        ODY_CHECK(rule.heads == 0 || rule.heads % t == 0,
                  "parameter {}: its {} heads (model.n_head / model.n_kv_head) do not split over "
                  "parallel.tp = {}",
                  p.name, rule.heads, t);
        ODY_CHECK(extent % (int64_t(rule.parts) * t) == 0,
                  "parameter {}: dimension {} of size {} does not split over parallel.tp = {}", p.name,
                  rule.dim, extent, t);
      }
      p.shard = s;
    }
    out.append(p);
  }
  for (; u < num_units() - 1; ++u) out.begin_unit();
  out.finish();
  return out;
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
    const uint64_t t = uint64_t(p.index);
    // Elements [b, e) of tensor t lie in the range.
    const int64_t b = std::max<int64_t>(begin - p.offset, 0), e = std::min<int64_t>(end - p.offset, p.numel);
    if (b >= e) continue;
    std::fill(params + p.offset + b, params + p.offset + e, 0.0f);  // padding rows stay zero
    // Each run the piece holds of the global tensor, clipped to [b, e), drawn at its global index.
    p.for_each_run([&](int64_t local, int64_t global, int64_t len) {
      const int64_t lb = std::max(local, b), le = std::min(local + len, e);
      if (lb >= le) return;
      float* x = params + p.offset + lb;
      const size_t n = size_t(le - lb);
      const uint64_t at = uint64_t(global + (lb - local));
      switch (p.init) {
        case ParamInfo::Init::normal:
          philox_fill_normal(x, n, 0.0f, std, seed, t, at);
          break;
        case ParamInfo::Init::normal_residual:
          philox_fill_normal(x, n, 0.0f, residual_std, seed, t, at);
          break;
        case ParamInfo::Init::zeros:
          break;
        case ParamInfo::Init::ones:
          std::fill(x, x + n, 1.0f);
          break;
      }
    });
  }
}

void init_parameters(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed) {
  init_parameter_range(params, table, config, seed, 0, table.total());
}

}  // namespace odyssey
