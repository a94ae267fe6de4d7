#include "odyssey/model/lm_head.h"

#include <algorithm>
#include <cstddef>

#include "odyssey/core/error.h"
#include "odyssey/kernels/cross_entropy.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {

void lm_head_loss(const LmHeadArgs& a, OpObserver* o) {
  ODY_CHECK(a.chunk > 0, "LM head: chunk of {} rows", a.chunk);
  const bool train = a.dloss > 0;
  const int C = a.C, V = a.V;
  for (int r0 = 0; r0 < a.N; r0 += a.chunk) {
    const int m = std::min(a.chunk, a.N - r0);
    const float* x = a.x + size_t(r0) * C;
    const double flops = 2.0 * m * double(C) * V;
    observed(o, "gemm.fwd.lm_head", flops, [&] { linear_forward(a.block, x, a.w, nullptr, m, C, V); });
    if (!train) {
      observed(o, "cross_entropy.fwd", 0,
               [&] { cross_entropy_forward(a.losses + r0, a.block, a.targets + r0, m, V); });
      continue;
    }
    observed(o, "cross_entropy.fwd_bwd", 0,
             [&] { cross_entropy_forward_backward(a.block, a.losses + r0, a.targets + r0, m, V, a.dloss); });
    observed(o, "gemm.dinp.lm_head", flops,
             [&] { linear_backward_input(a.dx + size_t(r0) * C, a.block, a.w, m, C, V); });
    observed(o, "gemm.dweight.lm_head", flops, [&] { linear_backward_weight(a.dw, a.block, x, m, C, V); });
  }
}

}  // namespace odyssey
