#include "odyssey/model/gpt2.h"

#include <algorithm>

#include "odyssey/core/error.h"
#include "odyssey/kernels/embedding.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {

// --- activations ---------------------------------------------------------------------------------

namespace {

// The stage's own buffers (beside its layers and the blocks' scratch): those every architecture has
// (layer_loop.h) and the final norm's weight and bias [2C] with the head.
template <typename F>
void for_each_own_buffer(const ModelConfig& c, const StageRange& range, int B, int T,
                         const MemoryOptions& memory, const TpSplit& split, int64_t vocab_rows, F&& f) {
  for_each_stage_buffer<Gpt2Activations, Gpt2LayerActs>(c, range, B, T, memory, split, vocab_rows, f);
  f(&Gpt2Activations::final_norm, range.head(c) ? 2 * size_t(c.d_model) : 0);
}

}  // namespace

void Gpt2Activations::allocate(const ModelConfig& c, const StageRange& range_, int B_, int T_,
                               bool shared_qkv_, const MemoryOptions& memory, const TpSplit& split_,
                               int64_t vocab_rows, const QueryChunks& query_chunks_) {
  const bool sized =
      allocate_stage(*this, c, range_, B_, T_, shared_qkv_, memory, split_, query_chunks_,
                     [&](auto f) { for_each_own_buffer(c, range_, B_, T_, memory, split_, vocab_rows, f); });
  if (sized) final_norm_sums.reset(range.head(c) ? int(2 * c.d_model) : 0);
}

size_t Gpt2Activations::bytes() const {
  return stage_held_bytes(*this, [](auto&&... args) { for_each_own_buffer(args...); });
}

size_t Gpt2Activations::bytes_for(const ModelConfig& c, const StageRange& range, int B, int T,
                                  bool shared_qkv, const MemoryOptions& memory, const TpSplit& split,
                                  int64_t vocab_rows, const QueryChunks& query_chunks) {
  return layers_bytes_for<Gpt2LayerActs, Gpt2BlockScratch>(c, range, B, T, shared_qkv, memory, split,
                                                           query_chunks) +
         listed_bytes([&](auto f) { for_each_own_buffer(c, range, B, T, memory, split, vocab_rows, f); });
}

// --- the model -----------------------------------------------------------------------------------

namespace {
// The configuration is checked before anything is sized from it; the table is cut for the piece.
ParamTable checked_table(const ModelConfig& c, const StageRange& range, const TpPiece& tp) {
  c.validate();
  const ParamTable table = gpt2_stage_table(c, range.resolved(c));
  return tp.size > 1 ? table.tensor_parallel(tp.size, tp.rank) : table;
}
}  // namespace

GPT2::GPT2(const ModelConfig& config, bool allocate_storage, const StageRange& range, const TpPiece& tp)
    : LayerStage(config, range.resolved(config), checked_table(config, range, tp), allocate_storage, true,
                 tp),
      names_(table_, range_) {}

std::unique_ptr<StageActivations> GPT2::make_activations() const {
  return std::make_unique<Gpt2Activations>();
}

Logits GPT2::logits(const StageActivations& acts) const {
  return kept_logits(static_cast<const Gpt2Activations&>(acts), has_head(), vocab_->rows(config_.vocab_size));
}

void GPT2::forward(StageActivations& acts, const int* inputs, const int* targets, const int* positions, int B,
                   int T) {
  Gpt2Activations& a = start_forward<Gpt2Activations>(acts, inputs, targets, positions, B, T);
  const float* input = forward_embeddings(a, names_.wte, names_.wpe);
  forward_layers(a.kept, input, range_.layer_begin, range_.layers(), *hooks_, layer_unit(range_.layer_begin),
                 [&](Gpt2LayerActs& la, const float* x, int l) {
                   gpt2_block_forward(la, x, resolve_layer(names_.layer(l), param_at()), *attention_,
                                      *linears_, a.scratch, shape(a), observer_);
                 });
  forward_final_units(a, names_.lnf_w, names_.lnf_b);
}

double GPT2::loss(StageActivations& acts, float dloss, int64_t* count) {
  Gpt2Activations& a = static_cast<Gpt2Activations&>(acts);
  FinalNorm norm;  // a LayerNorm: weight [C], bias [C]
  norm.weight = a.final_norm.data(), norm.bias = a.final_norm.data() + config_.d_model;
  return stage_loss(a, norm, names_.wte, dloss, count);
}

void GPT2::backward(StageActivations& acts) {
  Gpt2Activations& a = static_cast<Gpt2Activations&>(acts);
  backward_final_units(a, names_.lnf_w, names_.lnf_b);
  backward_layers(a.kept, layers_input(a), range_.layer_begin, range_.layers(), *hooks_,
                  layer_unit(range_.layer_begin),
                  [&](Gpt2LayerActs& la, const float* x, int l, const Recompute& re) {
                    gpt2_block_backward(a.dres.data(), la, x, resolve_layer(names_.layer(l), param_at()),
                                        resolve_layer(names_.layer(l), grad_at()), *attention_,
                                        backward_linears(), a.scratch, shape(a), observer_, re);
                  });
  backward_embeddings(a, names_.wte, names_.wpe);
}

// --- incremental inference ----------------------------------------------------------------------

namespace {

// The whole model forward only, one layer's activations reused by every layer, the head on the last row.
class Gpt2Decoder : public Decoder {
 public:
  Gpt2Decoder(const GPT2& model, int max_tokens) : model_(model) {
    const ModelConfig& c = model.config();
    x_.resize(size_t(max_tokens) * c.d_model);
    acts_.allocate(c, 1, max_tokens, true);
    ln_.resize(size_t(c.d_model)), mean_.resize(1), rstd_.resize(1);
    logits_.resize(size_t(c.vocab_size));
  }

  const float* run(const int* tokens, const int* positions, int T, AttentionOp* const* attention) override {
    const ModelConfig& c = model_.config();
    const Gpt2Params& p = model_.names();
    const auto w = model_.param_at();
    embedding_forward(x_.data(), tokens, positions, w(*p.wte), w(*p.wpe), T, c.d_model);
    for (int l = 0; l < c.n_layer; ++l) {
      gpt2_block_forward(acts_, x_.data(), resolve_layer(p.layer(l), w), *attention[l], local_linears(),
                         scratch_, {1, T, c.d_model, c.n_head});
      std::swap(x_, acts_.residual3);  // the block's output is the next layer's input
    }
    const float* last = x_.data() + size_t(T - 1) * c.d_model;
    layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), last, w(*p.lnf_w), w(*p.lnf_b), 1, c.d_model);
    linear_forward(logits_.data(), ln_.data(), w(*p.wte), nullptr, 1, c.d_model, c.vocab_size);
    return logits_.data();
  }

  size_t bytes() const override {
    return x_.bytes() + acts_.bytes() + scratch_.bytes() + ln_.bytes() + mean_.bytes() + rstd_.bytes() +
           logits_.bytes();
  }

 private:
  const GPT2& model_;
  FloatBuffer x_;             // [max_tokens, C] residual stream (swapped with the block's output)
  Gpt2LayerActs acts_;        // one layer's activations
  Gpt2BlockScratch scratch_;  // forward only: empty
  FloatBuffer ln_, mean_, rstd_, logits_;
};

}  // namespace

std::unique_ptr<Decoder> GPT2::make_decoder(int max_tokens) const {
  ODY_CHECK(range_ == StageRange{}.resolved(config_) && tp_.size == 1,
            "incremental inference runs the whole model, not a stage or a tensor-parallel piece");
  return std::make_unique<Gpt2Decoder>(*this, max_tokens);
}

double training_flops_per_token(const ModelConfig& c, int T) {
  const double C = c.d_model, L = c.n_layer, V = c.vocab_size;
  const double matmul_params = L * 12.0 * C * C + V * C;  // qkv, proj, fc, fc_proj; LM head
  return 6.0 * matmul_params + 6.0 * L * C * T;
}

}  // namespace odyssey
