// The fast attention kernel behind attention_forward / attention_backward: the blockwise algorithm of
// attention_schedule.h over attention_tiles.h's register-blocked micro-tiles, sized for the ISA the
// build targets, in 48 x 48 tiles (multiples of the micro-tile rows; a query tile, its output and the
// key/value tiles of head size 128 stay within L1 + L2 of one core).
#include "odyssey/kernels/attention.h"

#include "odyssey/kernels/attention_schedule.h"
#include "odyssey/kernels/attention_tiles.h"

namespace odyssey {
namespace {

struct FastTiles {
  using vf = attention_tiles::vf;
  static constexpr int kW = attention_tiles::kW;
  static constexpr int kRows = attention_tiles::kMR;
  static constexpr int kBlockQ = 8 * kRows;
  static constexpr int kBlockK = 8 * kRows;
  static vf load(const float* p) { return attention_tiles::load(p); }
  static void store(float* p, vf v) { attention_tiles::store(p, v); }
  static vf splat(float x) { return attention_tiles::splat(x); }
  static vf vmax(vf a, vf b) { return attention_tiles::vmax(a, b); }
  static float hmax(vf v) { return attention_tiles::hmax(v); }
  static float hsum(vf v) { return attention_tiles::hsum(v); }
  static vf vexp(vf x) { return attention_tiles::vexp(x); }
  static void abt(float* s, const float* a, int64_t lda, const float* bt, int D, int M) {
    attention_tiles::product<false, false>(s, kBlockK, a, lda, bt, kBlockK, M, D, kBlockK);
  }
  template <bool TransA>
  static void ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                 int K, int W) {
    attention_tiles::product<TransA, true>(c, ldc, a, lda, b, ldb, M, K, W);
  }
};

using Kernel = attention_detail::BlockwiseAttention<FastTiles>;

}  // namespace

void attention_forward(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                       AttentionDims dims, AttentionMask mask, float scale) {
  Kernel::forward(out, lse, q, k, v, dims, mask, scale);
}

void attention_backward(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout, HeadsView out,
                        const float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims,
                        AttentionMask mask, float scale) {
  Kernel::backward(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
}

}  // namespace odyssey
