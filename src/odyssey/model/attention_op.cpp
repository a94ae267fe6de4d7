#include "odyssey/model/attention_op.h"

#include <cmath>
#include <cstdint>

#include "odyssey/kernels/attention.h"

namespace odyssey {

// q, k and v are strided views into qkv [B, T, 3C]: row stride 3C, offsets 0, C, 2C.
static void qkv_views(const float* qkv, int T, int C, HeadsView* q, HeadsView* k, HeadsView* v) {
  int64_t bs = int64_t(T) * 3 * C, rs = 3 * C;
  *q = {qkv, bs, rs};
  *k = {qkv + C, bs, rs};
  *v = {qkv + 2 * C, bs, rs};
}

void LocalAttention::forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
                             AttentionSavedPtr& saved) {
  saved.reset();  // out, lse and the layer's qkv are all backward needs
  int C = H * D;
  HeadsView q, k, v;
  qkv_views(qkv, T, C, &q, &k, &v);
  attention_forward({out, int64_t(T) * C, C}, lse, q, k, v, {B, T, T, H, H, D}, {MaskKind::causal, 0, 0},
                    1.0f / std::sqrt(float(D)));
}

void LocalAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse,
                              const float* qkv, int B, int T, int H, int D, const AttentionSaved* /*saved*/) {
  int C = H * D;
  HeadsView q, k, v;
  qkv_views(qkv, T, C, &q, &k, &v);
  int64_t bs = int64_t(T) * 3 * C, rs = 3 * C;
  attention_backward({dqkv, bs, rs}, {dqkv + C, bs, rs}, {dqkv + 2 * C, bs, rs}, {dout, int64_t(T) * C, C},
                     {out, int64_t(T) * C, C}, lse, q, k, v, {B, T, T, H, H, D}, {MaskKind::causal, 0, 0},
                     1.0f / std::sqrt(float(D)));
}

}  // namespace odyssey
