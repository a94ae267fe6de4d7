#include "odyssey/model/qwen2.h"

namespace odyssey {

ParamTable qwen2_param_table(const ModelConfig& config) {
  return llama_param_table(config, true);
}

std::unique_ptr<BlockStage> make_qwen2_stage(const ModelConfig& config, bool allocate_storage,
                                             const StageRange& range, const TpPiece& tp) {
  return make_llama_stage(config, allocate_storage, range, tp, true);
}

}  // namespace odyssey
