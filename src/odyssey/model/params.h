// The parameter table: every GPT-2 parameter lives in one flat fp32 buffer; this table names each
// tensor and gives its global shape and offset (as llm.c). Gradients and Adam moments mirror the
// buffer, so sharding, bucketing and checkpoint slicing are offset arithmetic.
//
// Order (per-layer contiguous, so a layer is one range for ZeRO-3 gathers):
//   wte [V, C], wpe [maxT, C],
//   for each layer l: h.l.ln_1.weight [C], h.l.ln_1.bias [C],
//                     h.l.attn.c_attn.weight [3C, C], h.l.attn.c_attn.bias [3C],
//                     h.l.attn.c_proj.weight [C, C], h.l.attn.c_proj.bias [C],
//                     h.l.ln_2.weight [C], h.l.ln_2.bias [C],
//                     h.l.mlp.c_fc.weight [4C, C], h.l.mlp.c_fc.bias [4C],
//                     h.l.mlp.c_proj.weight [C, 4C], h.l.mlp.c_proj.bias [C],
//   ln_f.weight [C], ln_f.bias [C].
// Linear weights are [out, in] (nn.Linear); Hugging Face's Conv1D stores [in, out]: export and
// import transpose. The LM head is tied to wte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/model/config.h"

namespace odyssey {

struct ParamInfo {
  std::string name;            // e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // global shape
  int64_t offset = 0;          // into the flat buffer, in elements
  int64_t numel = 0;
  int unit = 0;               // the unit it belongs to (see ParamTable)
  bool weight_decay = false;  // AdamW decay: matrices and embeddings yes, biases and norms no
  // GPT-2 init: normal(0, 0.02) for matrices and embeddings, residual projections (attn.c_proj,
  // mlp.c_proj) scaled by 1/sqrt(2 n_layer); biases zero; LayerNorm weights one.
  enum class Init { normal, normal_residual, zeros, ones } init = Init::zeros;
};

// Offsets of one layer's tensors, in table order.
struct LayerParams {
  const ParamInfo *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attn_proj_w, *attn_proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
      *fc_proj_w, *fc_proj_b;
};

// Units: the granularity at which parallel code handles parameters (ZeRO-3 gathers one unit at a
// time, data parallelism reduces a unit's gradients when its backward is done).
//   unit 0: wte, wpe (embeddings; wte is also the LM head)   unit 1 + l: layer l   unit L + 1: ln_f
// Each unit is one contiguous range of the flat buffer.
class ParamTable {
 public:
  explicit ParamTable(const ModelConfig& config);

  const std::vector<ParamInfo>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }
  const ParamInfo& find(const std::string& name) const;  // fails naming the tensor if absent
  const ParamInfo* try_find(const std::string& name) const;

  const ParamInfo& wte() const { return tensors_[0]; }
  const ParamInfo& wpe() const { return tensors_[1]; }
  const LayerParams& layer(int l) const { return layers_[size_t(l)]; }
  const ParamInfo& lnf_w() const { return tensors_[tensors_.size() - 2]; }
  const ParamInfo& lnf_b() const { return tensors_[tensors_.size() - 1]; }
  // [begin, end) element range of layer l in the flat buffer.
  std::pair<int64_t, int64_t> layer_range(int l) const;

  int num_units() const { return int(unit_begin_.size()) - 1; }
  static int layer_unit(int l) { return l + 1; }
  int final_unit() const { return num_units() - 1; }
  int64_t unit_begin(int u) const { return unit_begin_[size_t(u)]; }
  int64_t unit_end(int u) const { return unit_begin_[size_t(u) + 1]; }
  int64_t unit_size(int u) const { return unit_end(u) - unit_begin(u); }

 private:
  std::vector<ParamInfo> tensors_;
  std::vector<LayerParams> layers_;
  std::vector<int64_t> unit_begin_;  // num_units + 1 boundaries
  int64_t total_ = 0;
};

// Fills params with GPT-2's initialisation, deterministically from seed: tensor t's values are a
// Philox stream keyed by (seed, t), so they do not depend on how the buffer is sharded.
void init_parameters(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed);
// The same for dense elements [begin, end) only (the rest of params is not touched): a rank that keeps
// a shard initialises only its shard, and its values equal those of the whole-buffer call.
void init_parameter_range(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed,
                          int64_t begin, int64_t end);

}  // namespace odyssey
