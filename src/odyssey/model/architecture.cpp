#include "odyssey/model/architecture.h"

#include "odyssey/core/error.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/llama.h"
#include "odyssey/model/qwen2.h"

namespace odyssey {

namespace {

std::unique_ptr<Stage> make_gpt2(const ModelConfig& config, const StageRange& range, bool allocate_storage,
                                 const TpPiece& tp) {
  return std::make_unique<GPT2>(config, allocate_storage, range, tp);
}

std::unique_ptr<Stage> make_llama(const ModelConfig& config, const StageRange& range, bool allocate_storage,
                                  const TpPiece& tp) {
  return make_llama_stage(config, allocate_storage, range, tp);
}

std::unique_ptr<Stage> make_qwen2(const ModelConfig& config, const StageRange& range, bool allocate_storage,
                                  const TpPiece& tp) {
  return make_qwen2_stage(config, allocate_storage, range, tp);
}

ParamTable llama_table(const ModelConfig& config) {
  return llama_param_table(config);
}

// The stage tables as the stages cut them (gpt2.cpp, llama.cpp), with nothing built.
const char* gpt2_tied_head(const ModelConfig&) {
  return "wte";
}
ParamTable gpt2_stage_table(const ModelConfig& c, const StageRange& range) {
  return stage_param_table(gpt2_param_table(c), c, range.resolved(c), gpt2_tied_head(c));
}
const char* llama_tied_head(const ModelConfig& c) {
  return c.tie_embeddings ? "model.embed_tokens.weight" : nullptr;
}
ParamTable llama_stage_table(const ModelConfig& c, const StageRange& range) {
  return stage_param_table(llama_param_table(c), c, range.resolved(c), llama_tied_head(c));
}
ParamTable qwen2_stage_table(const ModelConfig& c, const StageRange& range) {
  return stage_param_table(qwen2_param_table(c), c, range.resolved(c), llama_tied_head(c));
}

// Qwen2's biases are not matrices: its FLOPs are Llama's.
double llama_flops(const ModelConfig& config, int T) {
  return block_training_flops_per_token(llama_block(), config, T);
}

const Architecture kArchitectures[] = {
    {Arch::gpt2, validate_gpt2, gpt2_param_table, make_gpt2, init_parameter_range, training_flops_per_token,
     gpt2_stage_table, gpt2_block, gpt2_tied_head},
    {Arch::llama, validate_llama, llama_table, make_llama, init_parameter_range, llama_flops,
     llama_stage_table, llama_block, llama_tied_head},
    {Arch::qwen2, validate_llama, qwen2_param_table, make_qwen2, init_parameter_range, llama_flops,
     qwen2_stage_table, llama_block, llama_tied_head},
};

}  // namespace

const Architecture& architecture(Arch arch) {
  for (const Architecture& a : kArchitectures)
    if (a.arch == arch) return a;
  fail("model.arch: {} has no registered architecture", enum_name(kArchNames, arch));
}

void validate_model(const ModelConfig& config) {
  const Architecture& a = architecture(config.arch);
  config.validate();
  a.validate(config);
}

}  // namespace odyssey
