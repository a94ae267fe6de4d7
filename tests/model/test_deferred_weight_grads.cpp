// The recorded weight-gradient GEMMs of a split backward (model/deferred_weight_grads.h): run later,
// they give the bits of the GEMM run at once on the same operands, also when the output gradient's rows
// are strided (a column linear's LinearCall::ld_out: the LM head's padded logits block), and the
// operands may be overwritten once recorded.
#include "odyssey/model/deferred_weight_grads.h"

#include <gtest/gtest.h>

#include <vector>

#include "../kernels/reference.h"
#include "odyssey/kernels/linear.h"

namespace odyssey {
namespace {

using test::random_floats;

TEST(DeferredWeightGrads, StridedOutputGradientGivesTheImmediateBits) {
  const int n = 29, in = 19, out = 37, ld = out + 11;
  const std::vector<float> dy = random_floats(size_t(n) * out, 1), x = random_floats(size_t(n) * in, 2),
                           w0 = random_floats(size_t(out) * in, 3);
  std::vector<float> strided(size_t(n) * ld, 1e30f);  // the gap must never be read
  for (int r = 0; r < n; ++r) std::copy_n(dy.begin() + r * out, out, strided.begin() + r * ld);

  std::vector<float> now = w0;  // dW accumulates: start from a non-zero gradient
  linear_backward_weight(now.data(), dy.data(), x.data(), n, in, out);

  std::vector<float> later_dw = w0, x_copy = x;
  DeferredWeightGrads later;
  LinearCall c{n, in, out, "test", nullptr, ld};
  later.record(later_dw.data(), strided.data(), x_copy.data(), c);
  EXPECT_EQ(later.bytes(), size_t(n) * (in + out) * sizeof(float));  // kept dense
  std::fill(strided.begin(), strided.end(), 0.0f);  // recorded: the caller's buffers are free
  std::fill(x_copy.begin(), x_copy.end(), 0.0f);
  EXPECT_EQ(later_dw, w0);  // not run yet
  later.run();
  EXPECT_TRUE(later.empty());
  EXPECT_EQ(later_dw, now);
}

}  // namespace
}  // namespace odyssey
