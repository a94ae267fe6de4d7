#include "odyssey/model/llama.h"

#include <algorithm>

#include "odyssey/core/error.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/linear.h"
#include "odyssey/kernels/rmsnorm.h"
#include "odyssey/kernels/rope.h"

namespace odyssey {

// --- activations ---------------------------------------------------------------------------------

namespace {

// The configuration is checked before anything is sized from it.
ParamTable checked_table(const ModelConfig& c, const StageRange& range, const TpPiece& tp) {
  c.validate();
  const ParamTable table = llama_stage_table(c, range.resolved(c));
  return tp.size > 1 ? table.tensor_parallel(tp.size, tp.rank) : table;
}

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

namespace {

// The stage's own buffers (beside its layers and the blocks' scratch): those every architecture has
// (layer_loop.h), the rope tables [N, D/2] x 2 and, with the head, the final norm's weight [C].
template <typename F>
void for_each_own_buffer(const ModelConfig& c, const StageRange& range, int B, int T,
                         const MemoryOptions& memory, const TpSplit& split, int64_t vocab_rows, F&& f) {
  using A = LlamaActivations;
  const size_t N = size_t(B) * T, half = size_t(c.head_dim()) / 2;
  for_each_stage_buffer<A, LlamaLayerActs>(c, range, B, T, memory, split, vocab_rows, f);
  f(&A::rope_cos, N * half), f(&A::rope_sin, N * half);
  f(&A::final_norm, range.head(c) ? size_t(c.d_model) : 0);
}

}  // namespace

void LlamaActivations::allocate(const ModelConfig& c, const StageRange& range_, int B_, int T_,
                                bool shared_qkv_, const MemoryOptions& memory, const TpSplit& split_,
                                int64_t vocab_rows, const QueryChunks& query_chunks_) {
  const bool sized =
      allocate_stage(*this, c, range_, B_, T_, shared_qkv_, memory, split_, query_chunks_,
                     [&](auto f) { for_each_own_buffer(c, range_, B_, T_, memory, split_, vocab_rows, f); });
  if (sized) final_norm_sums.reset(range.head(c) ? c.d_model : 0);
}

size_t LlamaActivations::bytes() const {
  return stage_held_bytes(*this, [](auto&&... args) { for_each_own_buffer(args...); });
}

size_t LlamaActivations::bytes_for(const ModelConfig& c, const StageRange& range, int B, int T,
                                   bool shared_qkv, const MemoryOptions& memory, const TpSplit& split,
                                   int64_t vocab_rows, const QueryChunks& query_chunks) {
  return layers_bytes_for<LlamaLayerActs, LlamaBlockScratch>(c, range, B, T, shared_qkv, memory, split,
                                                             query_chunks) +
         listed_bytes([&](auto f) { for_each_own_buffer(c, range, B, T, memory, split, vocab_rows, f); });
}

// --- the model -----------------------------------------------------------------------------------

Llama::Llama(const ModelConfig& config, bool allocate_storage, const StageRange& range, const TpPiece& tp)
    : LayerStage(config, range.resolved(config), checked_table(config, range, tp), allocate_storage,
                 config.tie_embeddings, tp),
      names_(table_, range_, config_),
      inv_freq_(rope_inv_freq(config_.head_dim(), config_.rope_theta, rope_scaling(config_))) {}

std::unique_ptr<StageActivations> Llama::make_activations() const {
  return std::make_unique<LlamaActivations>();
}

Logits Llama::logits(const StageActivations& acts) const {
  return kept_logits(static_cast<const LlamaActivations&>(acts), has_head(),
                     vocab_->rows(config_.vocab_size));
}

void Llama::forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions,
                    int B, int T) {
  const ModelConfig& c = config_;
  LlamaActivations& a = start_forward<LlamaActivations>(acts, inputs, targets, positions, B, T);
  observed(observer_, "rope.tables", 0, [&] {
    rope_tables(a.rope_cos.data(), a.rope_sin.data(), a.positions.data(), B * T, inv_freq_.data(),
                c.head_dim());
  });
  const RopeTables rope{a.rope_cos.data(), a.rope_sin.data()};
  const LlamaShape shape = layer_shape(a);
  const float* input = forward_embeddings(a, names_.embed, nullptr);
  forward_layers(a.kept, input, range_.layer_begin, range_.layers(), *hooks_, layer_unit(range_.layer_begin),
                 [&](LlamaLayerActs& la, const float* x, int l) {
                   llama_block_forward(la, x, resolve_llama_layer(names_.layer(l), param_at()), *attention_,
                                       *linears_, a.scratch, shape, rope, observer_);
                 });
  forward_final_units(a, names_.norm, nullptr);
}

double Llama::loss(StageActivations& acts, float dloss, int64_t* count) {
  LlamaActivations& a = static_cast<LlamaActivations&>(acts);
  FinalNorm norm;  // an RMSNorm: weight [C]
  norm.weight = a.final_norm.data();
  norm.eps = float(config_.rms_norm_eps);
  return stage_loss(a, norm, names_.lm_head, dloss, count);
}

void Llama::backward(StageActivations& acts) {
  LlamaActivations& a = static_cast<LlamaActivations&>(acts);
  const RopeTables rope{a.rope_cos.data(), a.rope_sin.data()};
  const LlamaShape shape = layer_shape(a);
  backward_final_units(a, names_.norm, nullptr);
  backward_layers(
      a.kept, layers_input(a), range_.layer_begin, range_.layers(), *hooks_, layer_unit(range_.layer_begin),
      [&](LlamaLayerActs& la, const float* x, int l, const Recompute& re) {
        llama_block_backward(a.dres.data(), la, x, resolve_llama_layer(names_.layer(l), param_at()),
                             resolve_llama_layer(names_.layer(l), grad_at()), *attention_, backward_linears(),
                             a.scratch, shape, rope, observer_, re);
      });
  backward_embeddings(a, names_.embed, nullptr);
}

// --- incremental inference ----------------------------------------------------------------------

namespace {

// The whole model forward only, one layer's activations reused by every layer, RoPE at the given
// positions (the cache's), the final norm and head on the last row.
class LlamaDecoder : public Decoder {
 public:
  LlamaDecoder(const Llama& model, const std::vector<float>& inv_freq, int max_tokens)
      : model_(model), inv_freq_(inv_freq) {
    const ModelConfig& c = model.config();
    const size_t half = size_t(c.head_dim()) / 2;
    x_.resize(size_t(max_tokens) * c.d_model);
    acts_.allocate(c, 1, max_tokens, true);
    cos_.resize(size_t(max_tokens) * half), sin_.resize(size_t(max_tokens) * half);
    fn_.resize(size_t(c.d_model)), rstd_.resize(1);
    logits_.resize(size_t(c.vocab_size));
  }

  const float* run(const int* tokens, const int* positions, int T, AttentionOp* const* attention) override {
    const ModelConfig& c = model_.config();
    const LlamaParams& p = model_.names();
    const auto w = model_.param_at();
    rope_tables(cos_.data(), sin_.data(), positions, T, inv_freq_.data(), c.head_dim());
    embedding_forward(x_.data(), tokens, positions, w(*p.embed), nullptr, T, c.d_model);
    const LlamaShape shape = LlamaShape::of(c, 1, T);
    for (int l = 0; l < c.n_layer; ++l) {
      llama_block_forward(acts_, x_.data(), resolve_llama_layer(p.layer(l), w), *attention[l],
                          local_linears(), scratch_, shape, {cos_.data(), sin_.data()});
      std::swap(x_, acts_.residual3);
    }
    const float* last = x_.data() + size_t(T - 1) * c.d_model;
    rmsnorm_forward(fn_.data(), rstd_.data(), last, w(*p.norm), 1, c.d_model, float(c.rms_norm_eps));
    linear_forward(logits_.data(), fn_.data(), w(*p.lm_head), nullptr, 1, c.d_model, c.vocab_size);
    return logits_.data();
  }

  size_t bytes() const override {
    return x_.bytes() + acts_.bytes() + scratch_.bytes() + cos_.bytes() + sin_.bytes() + fn_.bytes() +
           rstd_.bytes() + logits_.bytes();
  }

 private:
  const Llama& model_;
  const std::vector<float>& inv_freq_;
  FloatBuffer x_;
  LlamaLayerActs acts_;
  LlamaBlockScratch scratch_;
  FloatBuffer cos_, sin_, fn_, rstd_, logits_;
};

}  // namespace

std::unique_ptr<Decoder> Llama::make_decoder(int max_tokens) const {
  ODY_CHECK(range_ == StageRange{}.resolved(config_) && tp_.size == 1,
            "incremental inference runs the whole model, not a stage or a tensor-parallel piece");
  return std::make_unique<LlamaDecoder>(*this, inv_freq_, max_tokens);
}

double llama_training_flops_per_token(const ModelConfig& c, int T) {
  const double C = c.d_model, L = c.n_layer, V = c.vocab_size, HD = double(c.n_head) * c.head_dim(),
               KD = double(c.kv_heads()) * c.head_dim(), F = c.ffn_dim();
  const double matmul_params = L * (C * (HD + 2 * KD) + HD * C + 3 * C * F) + V * C;
  return 6.0 * matmul_params + 6.0 * L * HD * T;
}

}  // namespace odyssey
