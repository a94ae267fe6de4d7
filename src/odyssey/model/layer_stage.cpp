#include "odyssey/model/layer_stage.h"

#include <algorithm>

#include "odyssey/core/error.h"
#include "odyssey/model/layer_loop.h"

namespace odyssey {

namespace {
// The key/value heads one rank's attention serves: its share of them, or the one head it holds when
// tp exceeds them (replicated over tp / K ranks, tensor-pipeline-parallelism.md §1.8).
int local_kv_heads(const ModelConfig& config, const TpPiece& tp) {
  const int K = config.kv_heads();
  return K % tp.size == 0 ? K / tp.size : 1;
}
}  // namespace

std::vector<UnitUse> stage_unit_schedule(const ModelConfig& config, const StageRange& range, bool tied_head) {
  // Units: the embeddings' (with them), one per layer, the final unit (with the head).
  const bool emb = range.embeddings(), head = range.head(config);
  const int first_layer_unit = emb ? 1 : 0, final_unit = first_layer_unit + range.layers();
  const bool head_in_unit0 = head && tied_head && emb;
  std::vector<UnitUse> schedule;
  if (emb) schedule.push_back({0, true});
  for (int l = 0; l < range.layers(); ++l) schedule.push_back({first_layer_unit + l, true});
  if (head) {
    schedule.push_back({final_unit, true});
    if (head_in_unit0) schedule.push_back({0, true});  // the tied LM head
    if (head_in_unit0) schedule.push_back({0, false});
    schedule.push_back({final_unit, false});
  }
  for (int l = range.layers() - 1; l >= 0; --l) schedule.push_back({first_layer_unit + l, false});
  if (emb && !head_in_unit0) schedule.push_back({0, false});  // the embedding backward
  return schedule;
}

LayerStage::LayerStage(const ModelConfig& config, const StageRange& range, ParamTable table,
                       bool allocate_storage, bool tied_head, const TpPiece& tp)
    : config_(config),
      range_(range),
      table_(std::move(table)),
      tied_head_(tied_head),
      tp_(tp),
      local_attention_(local_kv_heads(config, tp)) {
  schedule_ = stage_unit_schedule(config_, range_, tied_head_);
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

void LayerStage::set_tensor_parallel(LinearOps* linears, VocabOps* vocab) {
  LinearOps* l = linears ? linears : &local_linears();
  ODY_CHECK(l->tp() == tp_.size && l->tp_rank() == tp_.rank,
            "stage: tensor-parallel ops of rank {} of {} for a stage holding piece {} of {} (parallel.tp)",
            l->tp_rank(), l->tp(), tp_.rank, tp_.size);
  ODY_CHECK((vocab != nullptr) == (linears != nullptr),
            "stage: linear and vocabulary ops must be set together");
  linears_ = l;
  vocab_ = vocab ? vocab : &local_vocab();
}

void LayerStage::set_memory(const MemoryOptions& memory) {
  ODY_CHECK(memory.head_chunk_tokens >= 0, "memory.head_chunk_tokens must be >= 0, got {}",
            memory.head_chunk_tokens);
  ODY_CHECK(memory.chunk_tokens >= 0, "memory.chunk_tokens must be >= 0, got {}", memory.chunk_tokens);
  ODY_CHECK(memory.checkpoint != CheckpointPolicy::automatic,
            "memory.checkpoint = auto must be resolved to a policy before the stage runs");
  ODY_CHECK(
      memory.tier == MemoryTier::ram || keeps_layer_inputs(memory.checkpoint),
      "memory.tier = disk stores the layer inputs that memory.checkpoint = keep_attention or full keep; "
      "it cannot be used with memory.checkpoint = {}",
      enum_name(kCheckpointPolicyNames, memory.checkpoint));
  ODY_CHECK(memory.tier == MemoryTier::ram || !memory.offload_dir.empty(),
            "memory.tier = disk needs memory.offload_dir, a directory on a local disk");
  memory_ = memory;
  local_attention_.set_bf16(memory.bf16);  // the sequence-parallel ops know it from their options
}

void LayerStage::take_tokens(const int* inputs, const int* targets, const int* positions, int B, int T,
                             int* tokens, int* token_positions, int* token_targets) const {
  const int N = B * T, V = config_.vocab_size;
  const bool emb = range_.embeddings();
  for (int i = 0; i < N; ++i) {
    const int token = emb ? inputs[i] : 0;
    ODY_CHECK(token >= 0 && token < V, "token id {} at row {}, position {} is outside the vocabulary [0, {})",
              token, i / T, i % T, V);
    const int pos = positions ? positions[i % T] : i % T;
    ODY_CHECK(pos >= 0 && pos < config_.seq_len, "position {} outside the model's context {}", pos,
              config_.seq_len);
    tokens[i] = token;
    token_positions[i] = pos;
    token_targets[i] = targets ? targets[i] : -1;
  }
}

double LayerStage::head_loss(const float* x, const FinalNorm& norm, const ParamInfo* head_param,
                             const int* targets, float* losses, float* block, int chunk, float* dx, int N,
                             float dloss, int64_t* count) {
  ODY_CHECK(has_head() && head_param != nullptr, "loss: the stage of layers [{}, {}) has no LM head",
            range_.layer_begin, range_.layer_end);
  const ParamInfo& head = *head_param;
  const bool train = dloss > 0;
  if (train) {
    // The head's backward use of its unit (a tied head: the embedding's) starts here: its gradient
    // accumulates chunk by chunk.
    hooks_->before_backward(head_unit());
  }
  LmHeadArgs a;
  a.x = x;
  a.norm = norm;
  a.w = param(head);
  a.targets = targets;
  a.losses = losses;
  a.block = block;
  a.dx = dx;
  a.dw = train ? grad(head) : nullptr;
  a.N = N, a.C = config_.d_model, a.V = config_.vocab_size, a.chunk = chunk;
  a.layer_chunk = memory_.chunk_tokens;
  a.dloss = dloss;
  lm_head_loss(a, *linears_, *vocab_, observer_);
  double sum = 0;
  int64_t n = 0;
  for (int i = 0; i < N; ++i)
    if (targets[i] >= 0) sum += losses[i], ++n;
  if (count) *count = n;
  return sum;
}

}  // namespace odyssey
