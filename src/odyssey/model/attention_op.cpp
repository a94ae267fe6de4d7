#include "odyssey/model/attention_op.h"

#include <cmath>
#include <cstdint>

#include "odyssey/kernels/attention.h"
#include "odyssey/model/fused_qkv.h"

namespace odyssey {

LocalAttention::LocalAttention(int n_kv_head) : n_kv_head_(n_kv_head) {}

void LocalAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                             AttentionSavedPtr& saved) {
  saved.reset();  // out, lse and the layer's qkv are all backward needs
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  attention_forward(heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T),
                    {B, T, T, H, f.Hkv, D}, {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));
}

void LocalAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                              const float* qkv, int B, int T, int H, int D, const AttentionSaved* /*saved*/) {
  const FusedQkv f{H, n_kv_head_ ? n_kv_head_ : H, D};
  attention_backward(f.q(dqkv, T), f.k(dqkv, T), f.v(dqkv, T), heads_view(dout, T, H, D),
                     heads_view(out, T, H, D), lse, f.q(qkv, T), f.k(qkv, T), f.v(qkv, T),
                     {B, T, T, H, f.Hkv, D}, {MaskKind::causal, 0, 0}, 1.0f / std::sqrt(float(D)));
}

}  // namespace odyssey
