#include "odyssey/model/architecture.h"

#include "odyssey/core/error.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/gpt2_params.h"
#include "odyssey/model/llama.h"
#include "odyssey/model/llama_params.h"

namespace odyssey {

namespace {

std::unique_ptr<Stage> make_gpt2(const ModelConfig& config, const StageRange& range, bool allocate_storage,
                                 const TpPiece& tp) {
  return std::make_unique<GPT2>(config, allocate_storage, range, tp);
}

std::unique_ptr<Stage> make_llama(const ModelConfig& config, const StageRange& range, bool allocate_storage,
                                  const TpPiece& tp) {
  return std::make_unique<Llama>(config, allocate_storage, range, tp);
}

const Architecture kArchitectures[] = {
    {"gpt2", validate_gpt2, gpt2_param_table, make_gpt2, init_parameter_range, training_flops_per_token,
     gpt2_stage_table},
    {"llama", validate_llama, llama_param_table, make_llama, init_parameter_range,
     llama_training_flops_per_token, llama_stage_table},
};

}  // namespace

const Architecture& architecture(const std::string& name) {
  std::string known;
  for (const Architecture& a : kArchitectures) {
    if (name == a.name) return a;
    known += known.empty() ? a.name : std::string(", ") + a.name;
  }
  fail("model.arch: unknown architecture '{}' (supported: {})", name, known);
}

}  // namespace odyssey
