#include "odyssey/model/layer_stage.h"

#include "odyssey/core/error.h"

namespace odyssey {

LayerStage::LayerStage(const ModelConfig& config, const StageRange& range, ParamTable table,
                       bool allocate_storage, bool tied_head)
    : config_(config),
      range_(range),
      table_(std::move(table)),
      tied_head_(tied_head),
      local_attention_(config.kv_heads()) {
  const bool emb = range_.embeddings(), head = has_head();
  const bool head_in_unit0 = head && head_unit() != final_unit();
  if (emb) schedule_.push_back({0, true});
  for (int l = range_.layer_begin; l < range_.layer_end; ++l) schedule_.push_back({layer_unit(l), true});
  if (head) {
    schedule_.push_back({final_unit(), true});
    if (head_in_unit0) schedule_.push_back({0, true});  // the tied LM head
    if (head_in_unit0) schedule_.push_back({0, false});
    schedule_.push_back({final_unit(), false});
  }
  for (int l = range_.layer_end - 1; l >= range_.layer_begin; --l)
    schedule_.push_back({layer_unit(l), false});
  if (emb && !head_in_unit0) schedule_.push_back({0, false});  // the embedding backward
  unit_params_.assign(size_t(table_.num_units()), nullptr);
  unit_grads_.assign(size_t(table_.num_units()), nullptr);
  if (!allocate_storage) return;
  params_.resize(size_t(table_.total()));
  grads_.resize(size_t(table_.total()));
  for (int u = 0; u < table_.num_units(); ++u)
    set_unit_storage(u, params_.data() + table_.unit_begin(u), grads_.data() + table_.unit_begin(u));
}

void LayerStage::set_unit_storage(int unit, float* params, float* grads) {
  unit_params_[size_t(unit)] = params;
  unit_grads_[size_t(unit)] = grads;
}

void LayerStage::set_memory(const MemoryOptions& memory) {
  ODY_CHECK(memory.head_chunk_tokens >= 0, "memory.head_chunk_tokens must be >= 0, got {}",
            memory.head_chunk_tokens);
  ODY_CHECK(memory.checkpoint != CheckpointPolicy::automatic,
            "memory.checkpoint = auto must be resolved to a policy before the stage runs");
  memory_ = memory;
}

}  // namespace odyssey
