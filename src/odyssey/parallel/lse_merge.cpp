#include "odyssey/parallel/lse_merge.h"

#include <cmath>
#include <limits>

namespace odyssey {

void merge_attention_block(MutHeadsView acc_out, float* acc_lse, int64_t acc_ld, HeadsView blk_out,
                           const float* blk_lse, int B, int n, int H, int D) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      float* la_row = acc_lse + (int64_t(b) * H + h) * acc_ld;
      const float* lb_row = blk_lse + (int64_t(b) * H + h) * n;
      for (int i = 0; i < n; ++i) {
        const float la = la_row[i], lb = lb_row[i];
        if (lb == kNegInf) continue;
        float* oa = acc_out.data + b * acc_out.batch_stride + i * acc_out.row_stride + int64_t(h) * D;
        const float* ob = blk_out.data + b * blk_out.batch_stride + i * blk_out.row_stride + int64_t(h) * D;
        if (la == kNegInf) {
          for (int d = 0; d < D; ++d) oa[d] = ob[d];
          la_row[i] = lb;
          continue;
        }
        const float hi = std::max(la, lb), lo = std::min(la, lb);
        const float lse = hi + std::log1p(std::exp(lo - hi));
        const float wa = std::exp(la - lse), wb = std::exp(lb - lse);
        for (int d = 0; d < D; ++d) oa[d] = wa * oa[d] + wb * ob[d];
        la_row[i] = lse;
      }
    }
}

}  // namespace odyssey
