// The architecture registry: what the layers above the model need of an architecture, registered in
// one place (model.arch, an Arch, keys the entry). Each architecture keeps its parameter table, block and
// stage in its own files (gpt2_*, llama_*) and has one entry here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "odyssey/model/config.h"
#include "odyssey/model/params.h"
#include "odyssey/model/stage.h"

namespace odyssey {

struct BlockSpec;

struct Architecture {
  Arch arch;
  // The architecture's own shape rules (after the common ones of ModelConfig::validate), naming the key.
  void (*validate)(const ModelConfig& config);
  // Its parameter table (names, shapes, units, decay, init kinds), of the whole model.
  ParamTable (*make_table)(const ModelConfig& config);
  // A stage holding the layers of range (StageRange{}: the whole model); allocate_storage=false: no
  // full buffers (Stage::owns_storage); tp: its tensor-parallel piece ({}: the whole tensors).
  std::unique_ptr<Stage> (*make_stage)(const ModelConfig& config, const StageRange& range,
                                       bool allocate_storage, const TpPiece& tp);
  // Fills dense elements [begin, end) of the flat parameters deterministically from seed, independent of
  // any sharding (a range gives the values the whole-buffer fill gives there).
  void (*init)(float* params, const ParamTable& table, const ModelConfig& config, uint64_t seed,
               int64_t begin, int64_t end);
  // Model FLOPs per token of a training step at sequence length T (for MFU).
  double (*training_flops_per_token)(const ModelConfig& config, int T);
  // (Its Hugging Face adapter is registered beside the others in checkpoint/hf_adapter.h, a layer
  // above the model.)
  // The parameter table of a stage holding the layers of a resolved range, as make_stage builds it, with
  // nothing built (the footprint, train/footprint.h).
  ParamTable (*stage_table)(const ModelConfig& config, const StageRange& range);
  // Its block description (model/block.h): the buffers a layer keeps, each with its dtype and shape
  // rule, from which the footprint sizes the activations with nothing built.
  const BlockSpec& (*block)();
  // The name of the embedding tensor the LM head shares, or null when the head has its own matrix.
  const char* (*tied_head)(const ModelConfig& config);
};

// The registered architecture of arch (every Arch has one).
const Architecture& architecture(Arch arch);
// A model configuration's checks: the rules every architecture shares (ModelConfig::validate), then its
// architecture's; fails naming the key.
void validate_model(const ModelConfig& config);

}  // namespace odyssey
