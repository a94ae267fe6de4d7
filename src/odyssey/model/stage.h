// The model seam: what ZeRO, gradient sync, evaluation, generation and the trainer see of a model.
//
// A stage is a contiguous range of layers, with the embeddings and/or the LM head, of one
// architecture (model/architecture.h). Its forward, loss and backward are separate calls over
// activations the caller owns (make_activations(), one set per micro-batch in flight), so a schedule
// can keep several micro-batches alive and the head + loss can be chunked without touching the rest.
//
// Parameters come in units (ParamTable): the granularity at which parallel code gathers parameters
// and reduces gradients. A stage declares the order in which one micro-batch uses its units
// (unit_schedule()) and calls its LayerHooks around every use, in that order; ZeRO-3 prefetches from
// the schedule. Before a use, hooks may repoint the unit's storage (set_unit_storage), e.g. at
// gathered parameters; after_backward(u) means unit u's gradients for this micro-batch are complete.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/core/enum_names.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/model/config.h"
#include "odyssey/model/decoder.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/params.h"
#include "odyssey/model/vocab_ops.h"

namespace odyssey {

class DeferredWeightGrads;

// What a stage keeps of a micro-batch for its backward (long-context-memory.md; the [memory] keys).
// checkpoint: none keeps every layer's activations; cheap keeps all but the norm outputs and the MLP
// activation (recomputed in the backward, chunk by chunk); keep_attention keeps each layer's output and its
// attention's output, lse and saved tensors, and recomputes the rest of the layer in its backward;
// full keeps each layer's output (the next layer's input) and recomputes the whole layer. Recomputing
// issues exactly the forward's calls, so losses and gradients are bitwise those of none
// (model/layer_loop.h). auto is resolved by the trainer to the fastest that fits (none, cheap,
// keep_attention, full); a stage never sees it.
enum class CheckpointPolicy { none, cheap, keep_attention, full, automatic };
inline constexpr EnumNames<CheckpointPolicy, 5> kCheckpointPolicyNames = {
    {{"none", CheckpointPolicy::none},
     {"cheap", CheckpointPolicy::cheap},
     {"keep_attention", CheckpointPolicy::keep_attention},
     {"full", CheckpointPolicy::full},
     {"auto", CheckpointPolicy::automatic}}};
// keep_attention and full keep each layer's input and recompute the layer from it (the disk tier's case).
inline bool keeps_layer_inputs(CheckpointPolicy p) {
  return p == CheckpointPolicy::keep_attention || p == CheckpointPolicy::full;
}
// Where the layer inputs kept by keep_attention and full live between a layer's forward and its
// backward: in RAM, or (disk) in a scratch file in offload_dir written during the forward and read back
// one layer ahead during the backward, with two layer inputs resident (model/layer_loop.h).
enum class MemoryTier { ram, disk };
inline constexpr EnumNames<MemoryTier, 2> kMemoryTierNames = {
    {{"ram", MemoryTier::ram}, {"disk", MemoryTier::disk}}};
struct MemoryOptions {
  CheckpointPolicy checkpoint = CheckpointPolicy::none;
  int head_chunk_tokens = 0;  // rows of LM-head logits held at once (0: the whole micro-batch)
  int chunk_tokens = 0;       // rows per token-local chunk of a layer (0: the whole micro-batch)
  MemoryTier tier = MemoryTier::ram;
  std::string offload_dir = "";  // tier disk: the directory of the scratch files (this process's own)
  bool bf16 = false;  // train.precision = bf16: the layers hold the tensors the policy rounds in 2 bytes
};

class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_forward(int /*unit*/) {}
  virtual void after_forward(int /*unit*/) {}
  virtual void before_backward(int /*unit*/) {}
  virtual void after_backward(int /*unit*/) {}
};

// One use of a unit by a pass: its hooks are before_forward/after_forward (forward) or
// before_backward/after_backward (backward).
struct UnitUse {
  int unit;
  bool forward;
  bool operator==(const UnitUse&) const = default;
};

// Where each of a schedule's units is used: the schedule positions of its forward uses, in order, and
// of its backward use (-1: none). ZeRO-3 (parallel/zero.cpp) and the footprint's replay of it
// (train/footprint.cpp) walk the schedule by these.
struct UnitUses {
  std::vector<std::vector<int>> forward;  // per unit
  std::vector<int> backward;              // per unit
};
UnitUses index_unit_uses(const std::vector<UnitUse>& schedule, int units);

// The part of the model a stage holds: layers [layer_begin, layer_end), with the embeddings when it
// starts at layer 0 and the final norm and LM head when it ends at the last layer (a tied LM head
// then holds its own copy of the embedding matrix unless the stage also has the embeddings).
struct StageRange {
  int layer_begin = 0;
  int layer_end = -1;  // -1: the model's last layer + 1

  // The range with layer_end resolved; fails naming the range when it is empty or outside the model.
  StageRange resolved(const ModelConfig& config) const;
  int layers() const { return layer_end - layer_begin; }
  bool embeddings() const { return layer_begin == 0; }
  bool head(const ModelConfig& config) const { return layer_end == config.n_layer; }
  bool operator==(const StageRange&) const = default;
};

// The disk tier's traffic so far (memory.tier = disk): bytes written and read back, and the time the
// compute waited for the I/O thread (the stall).
struct OffloadStats {
  uint64_t bytes_written = 0, bytes_read = 0;
  double stall_seconds = 0;
  // Of bytes_read, what was queued only when the layer needing it began its backward (not overlapped
  // with the layer above's: its block did not hand those rows back, model/layer_loop.h).
  uint64_t bytes_read_late = 0;
};

// What a stage keeps of one micro-batch between its forward and its backward (per architecture).
//
// Pipeline hand-offs are hidden states [B*T, C] that the caller owns and keeps valid until the stage's
// backward returns: a stage without the embeddings reads its first layer's input from `input`; a stage
// without the LM head reads d(its output) from `output_grad` in backward (there is no loss() call).
class StageActivations {
 public:
  virtual ~StageActivations() = default;
  virtual size_t bytes() const = 0;  // what the attention op saved in the layers included
  virtual OffloadStats offload() const = 0;

  const float* input = nullptr;
  const float* output_grad = nullptr;
  // The last layer's output after forward; d(input) after backward (a stage without the embeddings).
  virtual const float* output() const = 0;
  virtual const float* input_grad() const = 0;
};

// The logits a forward kept: token i's row at data + i * stride, of this rank's vocabulary rows (V with
// one rank); the LM head pads its rows (logits_row_stride, model/lm_head.h). data null: none kept.
struct Logits {
  const float* data = nullptr;
  int64_t stride = 0;
  const float* row(int64_t i) const { return data + size_t(i) * size_t(stride); }
};

class Stage {
 public:
  virtual ~Stage() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const StageRange& range() const = 0;  // resolved
  virtual const ParamTable& table() const = 0;  // the stage's tensors only
  // False when the stage was built without full parameter/gradient buffers: every unit must then be
  // given storage with set_unit_storage before use (ZeRO-3 keeps only shards).
  virtual bool owns_storage() const = 0;
  // The full flat parameter and gradient buffers of the stage's table (null without owns_storage()).
  virtual float* params() = 0;
  virtual const float* params() const = 0;
  virtual float* grads() = 0;
  // Points unit u at other storage: params/grads hold the unit's range [unit_begin, unit_end).
  virtual void set_unit_storage(int unit, float* params, float* grads) = 0;
  // Where tensor t's parameters / gradients are now.
  virtual float* param(const ParamInfo& t) const = 0;
  virtual float* grad(const ParamInfo& t) const = 0;

  // Null restores the default (local attention, no hooks, no observer).
  virtual void set_attention(AttentionOp* op) = 0;
  virtual void set_hooks(LayerHooks* hooks) = 0;
  virtual void set_observer(OpObserver* observer) = 0;
  // How the stage's projections and vocabulary run: tensor-parallel ops over the group of its
  // TpPiece (parallel/tp_linear.h, parallel/vocab_parallel.h). Null restores the local ones.
  virtual void set_tensor_parallel(LinearOps* linears, VocabOps* vocab) = 0;
  // Rows of the residual stream this rank holds of a micro-batch's n tokens (its hand-offs, [rows, C]):
  // n, or under TP-SP its slice.
  virtual int64_t residual_rows(int64_t n) const = 0;
  // How activations are kept (logits() needs head_chunk_tokens 0 or >= the micro-batch's tokens).
  virtual void set_memory(const MemoryOptions& memory) = 0;
  // The split backward of zero-bubble pipelines (parallel/pipeline.h): while set, backward() computes
  // every gradient but the blocks' linear weight GEMMs, which it records in *later to run later
  // (model/deferred_weight_grads.h; norm, bias, embedding and LM-head gradients are not deferred).
  // Null: backward computes everything.
  virtual void set_deferred_weight_grads(DeferredWeightGrads* later) = 0;

  // The unit uses of one micro-batch, forward then backward; hooks are called in exactly this order.
  virtual const std::vector<UnitUse>& unit_schedule() const = 0;

  virtual std::unique_ptr<StageActivations> make_activations() const = 0;
  // inputs, targets: [B, T] token ids (target < 0: not counted); positions: [T] global positions of
  // the T tokens (null: 0..T-1). inputs are read only with the embeddings (otherwise acts.input),
  // targets only with the LM head.
  virtual void forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions,
                       int B, int T) = 0;
  // The sum of the token losses of the last forward (count: tokens counted). dloss > 0: also prepares
  // backward, each token's loss weighted by dloss (1 / tokens in the optimizer step).
  virtual double loss(StageActivations& acts, float dloss, int64_t* count) = 0;
  // Gradients accumulate into the units' gradient storage. With the LM head, after loss(acts, dloss > 0);
  // without it, from acts.output_grad.
  virtual void backward(StageActivations& acts) = 0;
  // Logits [B*T, V] of the last forward (valid after forward and a loss without dloss, when the LM head
  // ran as one chunk; data null otherwise).
  virtual Logits logits(const StageActivations& acts) const = 0;

  // Incremental inference over at most max_tokens tokens at a time (the KV cache); the whole model only.
  virtual std::unique_ptr<Decoder> make_decoder(int max_tokens) const = 0;

  // Memory: the activations of a micro-batch of B rows x T tokens and the attention op's scratch and
  // saved tensors, without allocating (the memory check); and what the attention op holds now.
  virtual size_t activation_bytes_for(int B, int T) const = 0;
  virtual size_t attention_bytes() const = 0;
  // The scratch file the disk tier writes for a micro-batch of B x T (0 with the RAM tier).
  virtual uint64_t offload_bytes_for(int B, int T) const = 0;

  // Conveniences over the stage's own activations (one micro-batch in flight).
  double forward(const int* inputs, const int* targets, const int* positions, int B, int T, int64_t* count);
  double forward_backward(const int* inputs, const int* targets, const int* positions, int B, int T,
                          float dloss, int64_t* count);
  Logits logits() const { return own_ ? logits(*own_) : Logits{}; }
  size_t activation_bytes() const { return (own_ ? own_->bytes() : 0) + attention_bytes(); }

 private:
  StageActivations& own();
  std::unique_ptr<StageActivations> own_;
};

}  // namespace odyssey
