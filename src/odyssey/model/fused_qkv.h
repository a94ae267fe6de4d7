// Views of a fused qkv activation [B, T, (H + 2 Hkv) D]: query heads, then key heads, then value
// heads on each token's row. GPT-2 has Hkv = H, i.e. [B, T, 3C]; a GQA model (Llama) has Hkv < H.
#pragma once

#include <cstdint>

#include "odyssey/kernels/attention.h"

namespace odyssey {

struct FusedQkv {
  int H, Hkv, D;

  int64_t width() const { return int64_t(H + 2 * Hkv) * D; }
  int64_t k_offset() const { return int64_t(H) * D; }
  int64_t v_offset() const { return int64_t(H + Hkv) * D; }

  HeadsView q(const float* qkv, int T) const { return {qkv, T * width(), width()}; }
  HeadsView k(const float* qkv, int T) const { return {qkv + k_offset(), T * width(), width()}; }
  HeadsView v(const float* qkv, int T) const { return {qkv + v_offset(), T * width(), width()}; }
  MutHeadsView q(float* qkv, int T) const { return {qkv, T * width(), width()}; }
  MutHeadsView k(float* qkv, int T) const { return {qkv + k_offset(), T * width(), width()}; }
  MutHeadsView v(float* qkv, int T) const { return {qkv + v_offset(), T * width(), width()}; }
};

// A contiguous [B, T, H, D] tensor as a view.
inline HeadsView heads_view(const float* x, int T, int H, int D) {
  return {x, int64_t(T) * H * D, int64_t(H) * D};
}
inline MutHeadsView heads_view(float* x, int T, int H, int D) {
  return {x, int64_t(T) * H * D, int64_t(H) * D};
}
inline HeadsView as_const(MutHeadsView x) {
  return {x.data, x.batch_stride, x.row_stride};
}

}  // namespace odyssey
