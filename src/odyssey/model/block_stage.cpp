#include "odyssey/model/block_stage.h"

#include <algorithm>

#include "odyssey/core/error.h"
#include "odyssey/core/tensor_view.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/linear.h"
#include "odyssey/kernels/rope.h"
#include "odyssey/model/block_runner.h"

namespace odyssey {

ParamTable stage_param_table(const ParamTable& whole, const ModelConfig& config, const StageRange& range,
                             const char* tied_head) {
  const int first = range.embeddings() ? 0 : 1 + range.layer_begin;
  const int last = range.head(config) ? config.n_layer + 1 : range.layer_end;
  ParamTable t = whole.units(first, last);
  if (tied_head && range.head(config) && !range.embeddings()) t.append(whole.find(tied_head));
  t.finish();
  return t;
}

// --- activations ---------------------------------------------------------------------------------

namespace {

using A = BlockActivations;

// The stage's own buffers, beside its layers and the blocks' scratch, written once: f(&A::buffer,
// elements) for each (allocate resizes them, bytes_for sums them, bytes() sums what they hold: every
// buffer is visited at every shape, with 0 elements when it holds none). encoded (with the embeddings,
// unless kept on disk) and dres [R, C]; with the head, losses [N], the head's buffers (logits [chunk G,
// rows(V)] and the final norm's chunk buffers) unless it borrows the scratch, and the final norm's
// parameters ([C], a LayerNorm's bias [C] after it); tokens, targets, positions [N]; RoPE's tables [N,
// D/2] x 2 with a block that rotates.
template <typename F>
void for_each_own_buffer(const BlockSpec& spec, const ModelConfig& c, const StageRange& range, int B, int T,
                         const MemoryOptions& memory, const TpSplit& split, int64_t vocab_rows, F&& f) {
  const size_t N = size_t(B) * T, C = size_t(c.d_model), R = size_t(split.rows(int64_t(N))),
               V = vocab_rows > 0 ? size_t(vocab_rows) : size_t(c.vocab_size),
               half = size_t(c.head_dim()) / 2;
  const bool head = range.head(c);
  f(&A::encoded, range.embeddings() && !KeptLayers<BlockActs>::keeps_embeddings(memory, true) ? R * C : 0);
  const size_t head_floats =
      head ? lm_head_floats(lm_head_rows(int(R), memory.head_chunk_tokens), split, int64_t(V), int(C)) : 0;
  f(&A::head_own, lm_head_borrows_scratch(head_floats, R, int(C)) ? 0 : head_floats);
  f(&A::losses, head ? N : 0);
  f(&A::tokens, N), f(&A::targets, N), f(&A::positions, N);
  f(&A::dres, R * C);
  f(&A::rope_cos, spec.rope ? N * half : 0), f(&A::rope_sin, spec.rope ? N * half : 0);
  f(&A::final_norm, head ? (spec.norm.bias ? 2 : 1) * C : 0);
}

// Under bf16 (MemoryOptions::bf16) the kept layers hold the rounded tensors in 2 bytes, the working layer
// (the recomputing policies') in fp32 but for the attention output keep_attention moves to the kept ones.
std::pair<Bf16Held, Bf16Held> bf16_held(const MemoryOptions& memory) {
  if (!memory.bf16) return {Bf16Held::none, Bf16Held::none};
  return {Bf16Held::all,
          memory.checkpoint == CheckpointPolicy::keep_attention ? Bf16Held::attention : Bf16Held::none};
}

}  // namespace

void BlockActivations::allocate(const ModelConfig& c, const StageRange& range_, int B_, int T_,
                                bool shared_qkv_, const MemoryOptions& memory, const TpSplit& split_,
                                int64_t vocab_rows, const QueryChunks& query_chunks_) {
  const int chunk = range_.head(c) ? lm_head_rows(int(split_.rows(B_ * T_)), memory.head_chunk_tokens) : 0;
  kept.work_layer = -1;
  if (B == B_ && T == T_ && range == range_ && shared_qkv == shared_qkv_ && head_chunk == chunk &&
      kept.allocated_for(memory) && layer_chunk == memory.chunk_tokens && split.t == split_.t &&
      split.sequence_parallel == split_.sequence_parallel && query_chunks == query_chunks_ &&
      bf16 == memory.bf16 && !kept.layers.empty())
    return;
  bf16 = memory.bf16;
  B = B_, T = T_, range = range_, split = split_, shared_qkv = shared_qkv_, head_chunk = chunk,
  layer_chunk = memory.chunk_tokens, kept.policy = memory.checkpoint, query_chunks = query_chunks_;
  const BlockDims d = spec->dims(c, split);
  const size_t N = size_t(B) * T, C = size_t(c.d_model), R = size_t(split.rows(int64_t(N)));
  const RowChunks rc = query_chunks.rows(int(R), layer_chunk, T);
  kept.chunks = rc.count();
  kept.layers.clear();
  kept.layers.resize(size_t(range.layers()));
  const LayerGroups groups = layer_groups(kept.policy, rc.chunk_rows(), query_chunks);
  const auto [kept_held, work_held] = bf16_held(memory);
  for (auto& l : kept.layers) l.allocate(*spec, d, B, T, !shared_qkv, groups.kept, split, kept_held);
  kept.allocate_outputs(range.layers(), rc, C, memory, range.layer_begin, range.embeddings(), dres);
  kept.work = {};
  if (groups.has_work) kept.work.allocate(*spec, d, B, T, !shared_qkv, groups.work, split, work_held);
  scratch.allocate(d, B, T, shared_qkv, true, layer_chunk, split, query_chunks);
  scratch.wide.fit(kept.layers.empty() ? kept.work : kept.layers[0], kept.work);
  // On disk the embeddings write into the kept layer inputs (KeptLayers::embeddings_output).
  for_each_own_buffer(*spec, c, range, B, T, memory, split, vocab_rows,
                      [this](auto m, size_t n) { (this->*m).resize(n); });
  final_norm_sums.reset(range.head(c) ? int(final_norm.size()) : 0);
}

// What the activations hold now: their own buffers (the list at a fixed shape: it visits every buffer at
// every one), the blocks' scratch and the layers.
size_t BlockActivations::bytes() const {
  return held_bytes(*this,
                    [this](auto f) {
                      for_each_own_buffer(*spec, ModelConfig{}, StageRange{}, 1, 1, MemoryOptions{},
                                          TpSplit{}, 0, f);
                    }) +
         scratch.bytes() + kept.bytes();
}

// Every kept layer, the working layer, a recomputing policy's layer outputs (in RAM but the last, which
// is in dres, or on disk with one slot resident: KeptLayers::allocate_outputs), the blocks' scratch and
// the stage's own buffers.
size_t BlockActivations::bytes_for(const BlockSpec& spec, const ModelConfig& c, const StageRange& range,
                                   int B, int T, bool shared_qkv, const MemoryOptions& memory,
                                   const TpSplit& split, int64_t vocab_rows, const QueryChunks& q) {
  const BlockDims d = spec.dims(c, split);
  const size_t N = size_t(B) * T, C = size_t(c.d_model), L = size_t(range.layers()),
               R = size_t(split.rows(int64_t(N)));
  const LayerGroups groups =
      layer_groups(memory.checkpoint, q.rows(int(R), memory.chunk_tokens, T).chunk_rows(), q);
  const auto [kept_held, work_held] = bf16_held(memory);
  const LayerRows none{0, 0, false, false}, work = groups.has_work ? groups.work : none;
  return L * BlockActs::bytes_for(spec, d, B, T, !shared_qkv, groups.kept, split, kept_held) +
         (groups.has_work ? BlockActs::bytes_for(spec, d, B, T, !shared_qkv, groups.work, split, work_held)
                          : 0) +
         BlockWide::bytes_for(spec, d, B, T, !shared_qkv, L ? groups.kept : none, kept_held, work, work_held,
                              split) +
         kept_output_bytes_for(int(L), R * C, memory, range.embeddings()) +
         BlockScratch::bytes_for(d, B, T, shared_qkv, true, memory.chunk_tokens, split, q) +
         listed_bytes(
             [&](auto f) { for_each_own_buffer(spec, c, range, B, T, memory, split, vocab_rows, f); });
}

StageMemory block_stage_memory(const BlockSpec& spec, const ModelConfig& c, const StageRange& range, int B,
                               int T, const MemoryOptions& memory, const TpSplit& split, int64_t vocab_rows,
                               const AttentionSizing& attention) {
  // As the stage runs it (LayerStage::query_chunking, shared_qkv): this rank's H heads of dimension D.
  const int H = c.n_head / split.t, D = c.head_dim(), R = int(split.rows(int64_t(B) * T));
  const QueryChunks qc = query_chunks(attention, split, R, memory.chunk_tokens, T, H, D);
  const bool shared_qkv = attention.saves_qkv() && !qc.on;
  const RowChunks rows = qc.rows(R, memory.chunk_tokens, T);
  StageMemory m;
  m.activations =
      BlockActivations::bytes_for(spec, c, range, B, T, shared_qkv, memory, split, vocab_rows, qc);
  if (qc.on) {
    m.attention_scratch = attention.chunk_bytes_for(rows.chunk_rows(), H, D);  // nothing saved per layer
  } else {
    // Layers whose attention keeps saved tensors at once: 1 under full checkpointing (the working
    // layer), every one otherwise.
    const int saving = memory.checkpoint == CheckpointPolicy::full ? 1 : range.layers();
    m.attention_scratch = attention.bytes_for(B, T, H, D, 0);
    m.activations += attention.bytes_for(B, T, H, D, saving) - m.attention_scratch;
  }
  m.offload = kept_output_disk_bytes_for(range.layers(), rows, size_t(c.d_model), memory, range.embeddings());
  // The layer's four GEMMs in this rank's shape: x [n, in] and dy [n, out] each (a column linear's full
  // input, a row linear's full output).
  const BlockDims d = spec.dims(c, split);
  const size_t per_token = size_t(d.C) + d.qkv_width() + d.attention_width() + d.C + d.C + d.up + d.act + d.C;
  m.deferred = size_t(range.layers()) * size_t(B) * size_t(T) * per_token * dtype_size(DType::f32);
  return m;
}

// --- the stage -----------------------------------------------------------------------------------

namespace {

RopeScalingParams rope_scaling(const ModelConfig& c) {
  RopeScalingParams p;
  p.llama3 = c.rope_scaling.enabled();
  p.factor = c.rope_scaling.factor;
  p.low_freq_factor = c.rope_scaling.low_freq_factor;
  p.high_freq_factor = c.rope_scaling.high_freq_factor;
  p.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  return p;
}

}  // namespace

BlockStage::BlockStage(const BlockSpec& spec, const ModelConfig& config, const StageRange& range,
                       ParamTable table,
                       StageParams (*names)(const ParamTable&, const StageRange&, const ModelConfig&),
                       bool allocate_storage, bool tied_head, const TpPiece& tp)
    : LayerStage(config, range, std::move(table), allocate_storage, tied_head, tp),
      spec_(spec),
      names_(names(table_, range_, config_)) {
  if (spec_.rope) inv_freq_ = rope_inv_freq(config_.head_dim(), config_.rope_theta, rope_scaling(config_));
}

std::unique_ptr<StageActivations> BlockStage::make_activations() const {
  return std::make_unique<BlockActivations>(spec_);
}

size_t BlockStage::activation_bytes_for(int B, int T) const {
  return memory_for(B, T).total();
}

uint64_t BlockStage::offload_bytes_for(int B, int T) const {
  return memory_for(B, T).offload;
}

// The logits of the head's block when it ran as one chunk over the micro-batch, rows
// logits_row_stride(vocab_rows) apart; none otherwise.
Logits BlockStage::logits(const StageActivations& acts) const {
  const auto& a = static_cast<const BlockActivations&>(acts);
  if (!has_head() || a.head_chunk != a.B * a.T) return {};
  return {const_cast<BlockActivations&>(a).head_buffers(),
          logits_row_stride(vocab_->rows(config_.vocab_size))};
}

void BlockStage::rope_tables_at(float* cos, float* sin, const int* positions, int n) const {
  rope_tables(cos, sin, positions, n, inv_freq_.data(), config_.head_dim());
}

void BlockStage::forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions,
                         int B, int T) {
  BlockActivations& a = start_forward<BlockActivations>(acts, inputs, targets, positions, B, T);
  if (spec_.rope)
    observed(observer_, "rope.tables", 0,
             [&] { rope_tables_at(a.rope_cos.data(), a.rope_sin.data(), a.positions.data(), B * T); });
  const BlockShape s = shape(a);
  const float* input = forward_embeddings(a, names_.embed, names_.positions);
  forward_layers(a.kept, input, range_.layer_begin, range_.layers(), *hooks_, layer_unit(range_.layer_begin),
                 [&](BlockActs& la, const float* x, int l) {
                   const BlockCall call{spec_,     *attention_, *linears_,
                                        a.scratch, s,           {a.rope_cos.data(), a.rope_sin.data()},
                                        observer_};
                   block_forward(call, la, x, resolve_block(names_.layer(l), param_at()));
                 });
  forward_final_units(a, names_.norm_w, names_.norm_b);
}

double BlockStage::loss(StageActivations& acts, float dloss, int64_t* count) {
  BlockActivations& a = static_cast<BlockActivations&>(acts);
  FinalNorm norm;  // a LayerNorm: weight [C], bias [C]; an RMSNorm: weight [C]
  norm.weight = a.final_norm.data();
  if (spec_.norm.bias) norm.bias = a.final_norm.data() + config_.d_model;
  norm.eps = dims().eps;
  return stage_loss(a, norm, names_.head, dloss, count);
}

void BlockStage::backward(StageActivations& acts) {
  BlockActivations& a = static_cast<BlockActivations&>(acts);
  const BlockShape s = shape(a);
  backward_final_units(a, names_.norm_w, names_.norm_b);
  backward_layers(a.kept, layers_input(a), range_.layer_begin, range_.layers(), *hooks_,
                  layer_unit(range_.layer_begin),
                  [&](BlockActs& la, const float* x, int l, const Recompute& re) {
                    const BlockCall call{spec_,     *attention_, backward_linears(),
                                         a.scratch, s,           {a.rope_cos.data(), a.rope_sin.data()},
                                         observer_};
                    block_backward(call, a.dres.data(), la, x, resolve_block(names_.layer(l), param_at()),
                                   resolve_block(names_.layer(l), grad_at()), re);
                  });
  backward_embeddings(a, names_.embed, names_.positions);
}

// --- incremental inference ----------------------------------------------------------------------

namespace {

// The whole model forward only, one layer's activations reused by every layer, RoPE at the given
// positions (the cache's), the final norm and head on the last row.
class BlockDecoder : public Decoder {
 public:
  BlockDecoder(const BlockStage& model, int max_tokens) : model_(model) {
    const ModelConfig& c = model.config();
    const BlockSpec& spec = model.block();
    const size_t half = size_t(c.head_dim()) / 2, rope = spec.rope ? size_t(max_tokens) * half : 0;
    x_.resize(size_t(max_tokens) * c.d_model);
    acts_.allocate(spec, model.dims(), 1, max_tokens, true);
    cos_.resize(rope), sin_.resize(rope);
    norm_.resize(size_t(c.d_model)), mean_.resize(spec.norm.bias ? 1 : 0), rstd_.resize(1);
    logits_.resize(size_t(c.vocab_size));
  }

  const float* run(const int* tokens, const int* positions, int T, AttentionOp* const* attention) override {
    const ModelConfig& c = model_.config();
    const BlockSpec& spec = model_.block();
    const StageParams& p = model_.names();
    const auto w = model_.param_at();
    if (spec.rope) model_.rope_tables_at(cos_.data(), sin_.data(), positions, T);
    embedding_forward(x_.data(), tokens, positions, w(*p.embed), p.positions ? w(*p.positions) : nullptr, T,
                      c.d_model);
    const BlockDims d = model_.dims();
    for (int l = 0; l < c.n_layer; ++l) {
      const BlockCall call{spec,     *attention[l], local_linears(),
                           scratch_, {1, T, d},     {cos_.data(), sin_.data()}};
      block_forward(call, acts_, x_.data(), resolve_block(p.layer(l), w));
      std::swap(x_, acts_.residual3);  // the block's output is the next layer's input
    }
    const float* last = x_.data() + size_t(T - 1) * c.d_model;
    spec.norm.forward(norm_.data(), mean_.size() ? mean_.data() : nullptr, rstd_.data(), last, w(*p.norm_w),
                      p.norm_b ? w(*p.norm_b) : nullptr, 1, c.d_model, d.eps);
    linear_forward(logits_.data(), norm_.data(), w(*p.head), nullptr, 1, c.d_model, c.vocab_size);
    return logits_.data();
  }

  size_t bytes() const override {
    return x_.bytes() + acts_.bytes() + scratch_.bytes() + cos_.bytes() + sin_.bytes() + norm_.bytes() +
           mean_.bytes() + rstd_.bytes() + logits_.bytes();
  }

 private:
  const BlockStage& model_;
  FloatBuffer x_;          // [max_tokens, C] residual stream (swapped with the block's output)
  BlockActs acts_;         // one layer's activations
  BlockScratch scratch_;   // forward only: empty
  FloatBuffer cos_, sin_;  // [max_tokens, D/2] with RoPE
  FloatBuffer norm_, mean_, rstd_, logits_;
};

}  // namespace

std::unique_ptr<Decoder> BlockStage::make_decoder(int max_tokens) const {
  ODY_CHECK(range_ == StageRange{}.resolved(config_) && tp_.size == 1,
            "incremental inference runs the whole model, not a stage or a tensor-parallel piece");
  return std::make_unique<BlockDecoder>(*this, max_tokens);
}

double block_training_flops_per_token(const BlockSpec& spec, const ModelConfig& c, int T) {
  const BlockDims d = spec.dims(c, {});
  const double C = c.d_model, L = c.n_layer, V = c.vocab_size, HD = d.attention_width(), W = d.qkv_width(),
               U = d.up, F = d.act;
  const double matmul_params = L * (C * W + HD * C + C * U + F * C) + V * C;
  return 6.0 * matmul_params + 6.0 * L * HD * T;
}

}  // namespace odyssey
