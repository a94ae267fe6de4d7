// The parameter table: every parameter of a model lives in one flat fp32 buffer; this table names
// each tensor and gives its global shape, offset, unit, decay rule and initialisation (as llm.c).
// Gradients and Adam moments mirror the buffer, so sharding, bucketing and checkpoint slicing are
// offset arithmetic. The table knows no architecture: each one builds its own (gpt2_params.h,
// llama_params.h) and the registry (architecture.h) names the builder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/model/config.h"

namespace odyssey {

// Which piece of a tensor a table holds (tensor parallelism splits a tensor across ranks): dimension
// `dim` of the global shape is `parts` sub-parameters laid end to end (GPT-2's c_attn: q, k, v), each
// cut into `count` equal pieces, and this table holds piece `index` of every part, concatenated.
// padded > 0: the dimension is padded to that size before it is cut (a vocabulary padded to a
// multiple of tp); rows past the real size are padding, held as zeros. dim = -1: the whole tensor.
// (Checkpoints store each piece as boxes of the global tensor: checkpoint/box.h.)
struct TensorShard {
  int dim = -1;
  int index = 0;
  int count = 1;
  int parts = 1;
  int64_t padded = 0;
  bool whole() const { return dim < 0; }
  bool operator==(const TensorShard&) const = default;
};

// How tensor parallelism over t ranks splits a tensor (tensor-pipeline-parallelism.md §1.4, §1.8):
// dim < 0: replicated on every rank. Otherwise dimension dim is split t ways in `parts` sub-parameters.
// heads > 0: the dimension holds that many heads per part, which t must divide (a cut never splits a
// head); with kv, t may instead be a multiple of them, and each rank then holds the one head
// r / (t / heads), replicated on t / heads ranks (Llama's k and v). vocab: the dimension is padded to a
// multiple of t (§1.5).
struct TpRule {
  int dim = -1;
  int parts = 1;
  int heads = 0;
  bool kv = false;
  bool vocab = false;
  bool operator==(const TpRule&) const = default;
};

// The tensor-parallel piece a rank holds: rank `rank` of `size` (tensor-pipeline-parallelism.md §1).
// Its tables are cut by ParamTable::tensor_parallel(size, rank). Tensors replicated over tp, and kv
// heads replicated when tp > n_kv_head, are held by several tp ranks.
struct TpPiece {
  int size = 1;
  int rank = 0;
};

struct ParamInfo {
  std::string name;            // e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // global shape
  TensorShard shard;           // the piece of it held here
  TpRule tp;                   // how tensor parallelism splits it
  int64_t offset = 0;          // into the flat buffer, in elements
  int64_t numel = 0;           // elements held here (the local shape's)
  int index = 0;               // position in the whole model's table: keys its initialisation stream, so
                               // a stage's or a shard's table draws the values the whole model's does
  int unit = 0;                // the unit it belongs to (see ParamTable)
  bool weight_decay = false;   // AdamW decay: matrices and embeddings yes, biases and norms no
  // normal(0, 0.02) for matrices and embeddings; normal_residual: scaled by 1/sqrt(2 n_layer)
  // (GPT-2's residual projections); zeros (biases), ones (norm weights).
  enum class Init { normal, normal_residual, zeros, ones } init = Init::zeros;

  // The shape of the piece held here (shape itself for a whole tensor).
  std::vector<int64_t> local_shape() const;
  // Calls f(local, global, n) for each run of n elements held here contiguously: local offset in the
  // piece, global offset in the row-major global tensor (padding rows are in no run).
  template <typename F>
  void for_each_run(F&& f) const;
};

// Units: the granularity at which parallel code handles parameters (ZeRO-3 gathers one unit at a
// time, data parallelism reduces a unit's gradients when its backward is done). Every architecture
// lays its units out the same way:
//   unit 0: embeddings   unit 1 + l: layer l   unit L + 1: final norm (and an untied LM head)
// Each unit is one contiguous range of the flat buffer.
class ParamTable {
 public:
  ParamTable() = default;
  // The table of the architecture config.arch names (architecture.h).
  explicit ParamTable(const ModelConfig& config);

  // Building, in buffer order: add() appends a tensor to the current unit; append() appends a copy of
  // another table's tensor (its name, shape, init and index kept); begin_unit() closes the unit and
  // opens the next; finish() closes the last.
  void add(std::string name, std::vector<int64_t> shape, ParamInfo::Init init, TpRule tp = {});
  void append(const ParamInfo& like);
  void begin_unit();
  void finish();
  // A pipeline stage's table: the tensors of this table's units [first, last], renumbered from unit 0
  // at offset 0 (init streams kept). The caller may append more (a tied head) before finish().
  ParamTable units(int first, int last) const;
  // Rank r's table under tensor parallelism over t ranks: every tensor cut by its TpRule (same names,
  // global shapes, units and init streams). Fails naming the tensor when a dimension does not split.
  ParamTable tensor_parallel(int t, int r) const;

  const std::vector<ParamInfo>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }
  const ParamInfo& find(const std::string& name) const;  // fails naming the tensor if absent
  const ParamInfo* try_find(const std::string& name) const;

  int num_units() const { return int(unit_begin_.size()) - 1; }
  int64_t unit_begin(int u) const { return unit_begin_[size_t(u)]; }
  int64_t unit_end(int u) const { return unit_begin_[size_t(u) + 1]; }
  int64_t unit_size(int u) const { return unit_end(u) - unit_begin(u); }

 private:
  std::vector<ParamInfo> tensors_;
  std::vector<int64_t> unit_begin_{0};  // num_units + 1 boundaries once finished
  int unit_ = 0;
  int64_t total_ = 0;
};

// Fills params by each tensor's Init, deterministically from seed: tensor t's values are a Philox
// stream keyed by (seed, t.index) and addressed by the global element index, so they do not depend on
// how the buffer is sharded, staged or split by tensor parallelism.
void init_parameters(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed);
// The same for dense elements [begin, end) only (the rest of params is not touched): a rank that keeps
// a shard initialises only its shard, and its values equal those of the whole-buffer call.
void init_parameter_range(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed,
                          int64_t begin, int64_t end);

template <typename F>
void ParamInfo::for_each_run(F&& f) const {
  if (shard.whole()) return f(int64_t{0}, int64_t{0}, numel);
  // The global tensor as [outer, extent, inner] around the cut dimension.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < shard.dim; ++d) outer *= shape[size_t(d)];
  for (size_t d = size_t(shard.dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t extent = shape[size_t(shard.dim)];
  const int64_t part = (shard.padded ? shard.padded : extent) / shard.parts;  // rows of one sub-parameter
  const int64_t piece = part / shard.count;                                   // rows of it held here
  int64_t local = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int s = 0; s < shard.parts; ++s) {
      const int64_t row = s * part + shard.index * piece;                        // first global row
      const int64_t real = std::max<int64_t>(0, std::min(piece, extent - row));  // not padding
      if (real > 0) f(local, (o * extent + row) * inner, real * inner);
      local += piece * inner;
    }
}

}  // namespace odyssey
