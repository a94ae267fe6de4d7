// Merging partial attention results (spec §1): a block's normalised output and log-sum-exp are
// folded into running ones exactly, in the overflow-free form
//   lse = max + log1p(exp(min - max)),  o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b,
// where every exponent is <= 0. A row that has seen no key yet (lse = -inf) takes the block as is;
// a block row that saw no key (-inf) changes nothing. All fp32 (the kernel returns fp32 blocks).
#pragma once

#include <cstdint>

#include "odyssey/kernels/attention.h"

namespace odyssey {

// acc_out [B, n, H, D] (a view), acc_lse: (b, h, i) at acc_lse[(b H + h) acc_ld + i];
// blk_out [B, n, H, D] (a view), blk_lse [B, H, n] contiguous.
void merge_attention_block(MutHeadsView acc_out, float* acc_lse, int64_t acc_ld, HeadsView blk_out,
                           const float* blk_lse, int B, int n, int H, int D);

}  // namespace odyssey
