#include "odyssey/model/gpt2.h"

#include <algorithm>
#include <limits>

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
  f(&Gpt2Activations::lnf_params, range.head(c) ? 2 * size_t(c.d_model) : 0);
}

}  // namespace

void Gpt2Activations::allocate(const ModelConfig& c, const StageRange& range_, int B_, int T_,
                               bool shared_qkv_, const MemoryOptions& memory, const TpSplit& split_,
                               int64_t vocab_rows, const QueryChunks& query_chunks_) {
  const bool sized =
      allocate_stage(*this, c, range_, B_, T_, shared_qkv_, memory, split_, query_chunks_,
                     [&](auto f) { for_each_own_buffer(c, range_, B_, T_, memory, split_, vocab_rows, f); });
  if (sized) lnf_sums.reset(range.head(c) ? int(2 * c.d_model) : 0);
}

size_t Gpt2Activations::bytes() const {
  return stage_held_bytes(*this, [](auto&&... args) { for_each_own_buffer(args...); });
}

size_t Gpt2Activations::bytes_for(const ModelConfig& c, const StageRange& range, int B, int T,
                                  bool shared_qkv, const MemoryOptions& memory, const TpSplit& split,
                                  int64_t vocab_rows, const QueryChunks& query_chunks) {
  size_t bytes = layers_bytes_for<Gpt2LayerActs, Gpt2BlockScratch>(c, range, B, T, shared_qkv, memory, split,
                                                                   query_chunks);
  for_each_own_buffer(c, range, B, T, memory, split, vocab_rows,
                      [&](auto m, size_t n) { bytes += n * element_bytes(m); });
  return bytes;
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
  const ModelConfig& c = config_;
  ODY_CHECK(B > 0 && T > 0, "forward: empty batch (B={}, T={})", B, T);
  ODY_CHECK(T <= c.seq_len, "sequence length {} exceeds the model's context model.seq_len={}", T, c.seq_len);
  ODY_CHECK(int64_t(B) * T <= std::numeric_limits<int>::max(), "forward: {} x {} tokens overflow", B, T);
  Gpt2Activations& a = static_cast<Gpt2Activations&>(acts);
  const bool emb = range_.embeddings();
  ODY_CHECK(emb || a.input,
            "forward: the stage of layers [{}, {}) needs its input hidden states (acts.input)",
            range_.layer_begin, range_.layer_end);
  const QueryChunks qc = query_chunking(B, T);
  a.allocate(c, range_, B, T, attention_->saves_qkv() && !qc.on, memory_, split(), vocab_->rows(c.vocab_size),
             qc);
  a.head_backward_done = false;
  const int N = B * T, C = c.d_model;
  take_tokens(inputs, targets, positions, B, T, a.tokens.data(), a.positions.data(), a.targets.data());
  auto w = [this](const ParamInfo& t) { return param(t); };
  OpObserver* o = observer_;
  const float* input = a.input;
  if (emb) {
    hooks_->before_forward(0);
    float* e = a.kept.embeddings_output(a.encoded);
    input = e;
    vocab_->embedding_forward(e, a.tokens.data(), a.positions.data(), w(*names_.wte), w(*names_.wpe), N, C,
                              memory_.chunk_tokens, o);
    a.kept.keep_embeddings_output();
    hooks_->after_forward(0);
  }
  forward_layers(a.kept, input, range_.layer_begin, range_.layers(), *hooks_, layer_unit(range_.layer_begin),
                 [&](Gpt2LayerActs& la, const float* x, int l) {
                   gpt2_block_forward(la, x, resolve_layer(names_.layer(l), w), *attention_, *linears_,
                                      a.scratch, shape(a), o);
                 });
  if (!has_head()) return;
  // The final norm's forward use: its weight and bias for loss(), which runs it chunk by chunk with the
  // head (no [N, C] norm output).
  hooks_->before_forward(final_unit());
  std::copy(w(*names_.lnf_w), w(*names_.lnf_w) + C, a.lnf_params.data());
  std::copy(w(*names_.lnf_b), w(*names_.lnf_b) + C, a.lnf_params.data() + C);
  hooks_->after_forward(final_unit());
  // The tied LM head's forward use: its logits are computed chunk by chunk in loss(), with the loss.
  if (head_unit() != final_unit()) {
    hooks_->before_forward(head_unit());
    hooks_->after_forward(head_unit());
  }
}

double GPT2::loss(StageActivations& acts, float dloss, int64_t* count) {
  Gpt2Activations& a = static_cast<Gpt2Activations&>(acts);
  // Recomputing policies keep the head's input in dres, which a loss with a gradient overwrites.
  ODY_CHECK(!(a.head_backward_done && a.kept.recomputes_layers()),
            "loss: a loss with a gradient already ran since the forward (memory.checkpoint = {} keeps the "
            "last layer's output where its gradient now is); run forward again",
            enum_name(kCheckpointPolicyNames, a.kept.policy));
  const int C = config_.d_model;
  FinalNorm norm;
  norm.weight = a.lnf_params.data(), norm.bias = a.lnf_params.data() + C;
  norm.sums = &a.lnf_sums;
  float* block =
      place_lm_head(a.head_buffers(), norm, a.head_chunk, split(), vocab_->rows(config_.vocab_size), C);
  const double sum = head_loss(a.output(), norm, names_.wte, a.targets.data(), a.losses.data(), block,
                               a.head_chunk, a.dres.data(), a.B * a.T, dloss, count);
  a.head_backward_done = dloss > 0;
  return sum;
}

void GPT2::backward(StageActivations& acts) {
  const ModelConfig& c = config_;
  Gpt2Activations& a = static_cast<Gpt2Activations&>(acts);
  const int N = a.B * a.T, C = c.d_model, R = int(split().rows(N));
  auto w = [this](const ParamInfo& t) { return param(t); };
  auto d = [this](const ParamInfo& t) { return grad(t); };
  OpObserver* o = observer_;
  const bool emb = range_.embeddings();

  if (has_head()) {
    ODY_CHECK(a.head_backward_done, "backward: no loss with a gradient weight (dloss > 0) since the forward");
    a.head_backward_done = false;
    // loss() left d(last layer output) in dres and the final norm's weight gradients in lnf_sums.
    if (final_unit() != head_unit()) hooks_->before_backward(final_unit());
    a.lnf_sums.finish(d(*names_.lnf_w), d(*names_.lnf_b));
    hooks_->after_backward(final_unit());
  } else {
    ODY_CHECK(a.output_grad, "backward: the stage of layers [{}, {}) needs d(its output) (acts.output_grad)",
              range_.layer_begin, range_.layer_end);
    std::copy(a.output_grad, a.output_grad + size_t(R) * C, a.dres.data());
  }
  const float* input = emb ? a.encoded.data() : a.input;
  backward_layers(a.kept, input, range_.layer_begin, range_.layers(), *hooks_, layer_unit(range_.layer_begin),
                  [&](Gpt2LayerActs& la, const float* x, int l, const Recompute& re) {
                    gpt2_block_backward(a.dres.data(), la, x, resolve_layer(names_.layer(l), w),
                                        resolve_layer(names_.layer(l), d), *attention_, backward_linears(),
                                        a.scratch, shape(a), o, re);
                  });
  if (!emb) return;                                                   // a.dres holds d(input)
  if (!(has_head() && head_unit() == 0)) hooks_->before_backward(0);  // else begun by the tied head
  vocab_->embedding_backward(d(*names_.wte), d(*names_.wpe), a.dres.data(), a.tokens.data(),
                             a.positions.data(), N, C, memory_.chunk_tokens, o);
  hooks_->after_backward(0);
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
    auto w = [&](const ParamInfo& t) { return model_.param(t); };
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
