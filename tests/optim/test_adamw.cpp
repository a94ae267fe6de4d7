// adamw_update against the formula in double precision and against adamw_update_reference (the same
// step with the bias corrections divided per element): the moments are the same bits, the parameters
// within a rounding of the update. And the same bits however the range is cut (ZeRO shards) and for
// any thread count.
#include "odyssey/optim/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

using namespace odyssey;

namespace {

struct AdamState {
  std::vector<float> params, m, v;
};

// Parameters and moments as after some training: v > 0 everywhere but a few exact zeros.
AdamState random_state(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  AdamState s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    s.params[i] =
        1e-2f * dist(gen);  // near an update's size (~lr), so a parameter's rounding hides no error in it
    s.m[i] = 1e-3f * dist(gen);
    s.v[i] = i % 97 == 0 ? 0.0f : 1e-6f * std::abs(dist(gen));
  }
  return s;
}

std::vector<float> random_grads(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1e-2f);
  std::vector<float> g(n);
  for (float& x : g) x = dist(gen);
  return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const AdamWConfig kConfig{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};

}  // namespace

TEST(AdamW, MatchesTheFormulaInDouble) {
  const size_t n = 4099;  // not a multiple of any vector width
  double max_error = 0;
  for (bool decay : {true, false}) {
    AdamState s = random_state(n, 11);
    std::vector<double> p(s.params.begin(), s.params.end()), m(s.m.begin(), s.m.end()),
        v(s.v.begin(), s.v.end());
    const double b1 = kConfig.beta1, b2 = kConfig.beta2, wd = decay ? kConfig.weight_decay : 0.0;
    for (int64_t step = 1; step <= 6; ++step) {
      const auto g = random_grads(n, uint32_t(100 + step));
      const float scale = step % 2 ? 1.0f : 0.37f, lr = kConfig.lr * float(step) / 6.0f;
      adamw_update(s.params.data(), g.data(), s.m.data(), s.v.data(), n, kConfig, lr, step, scale, decay);
      for (size_t i = 0; i < n; ++i) {
        const double gi = double(g[i]) * scale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        const double mhat = m[i] / (1 - std::pow(b1, step)), vhat = v[i] / (1 - std::pow(b2, step));
        p[i] -= lr * (mhat / (std::sqrt(vhat) + kConfig.eps) + wd * p[i]);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      // Six steps of up to ~lr each, a few float roundings of ~|p| (1e-2) per step: up to ~5e-9 seen.
      ASSERT_NEAR(s.params[i], p[i], 3e-8) << "element " << i << ", decay " << decay;
      max_error = std::max(max_error, std::abs(double(s.params[i]) - p[i]));
      // m's two terms (~1e-3) may cancel: its error is float's on them, not on the result.
      ASSERT_NEAR(s.m[i], m[i], 1e-9) << "element " << i;
      ASSERT_NEAR(s.v[i], v[i], 1e-6 * std::abs(v[i]) + 1e-15) << "element " << i;
    }
  }
  std::printf("largest parameter error against double: %.3g\n", max_error);
}

TEST(AdamW, WithinARoundingOfTheReference) {
  const size_t n = 100003;
  AdamState fast = random_state(n, 5), ref = fast;
  float largest_step = 0.0f, largest_difference = 0.0f;
  for (int64_t step = 1; step <= 4; ++step) {
    const auto g = random_grads(n, uint32_t(7 * step));
    const std::vector<float> before = fast.params;
    adamw_update(fast.params.data(), g.data(), fast.m.data(), fast.v.data(), n, kConfig, kConfig.lr, step,
                 0.8f, true);
    adamw_update_reference(ref.params.data(), g.data(), ref.m.data(), ref.v.data(), n, kConfig, kConfig.lr,
                           step, 0.8f, true);
    ASSERT_TRUE(same_bits(fast.m, ref.m)) << "step " << step;
    ASSERT_TRUE(same_bits(fast.v, ref.v)) << "step " << step;
    for (size_t i = 0; i < n; ++i) {
      const float update = std::abs(fast.params[i] - before[i]);
      largest_step = std::max(largest_step, update);
      largest_difference = std::max(largest_difference, std::abs(fast.params[i] - ref.params[i]));
      // The two differ only in mhat and vhat by an ulp each: the update by a few ulps of itself, the
      // parameter by at most an ulp of itself on top.
      ASSERT_LE(std::abs(fast.params[i] - ref.params[i]),
                4e-7f * update + std::nextafter(std::abs(ref.params[i]), INFINITY) - std::abs(ref.params[i]))
          << "element " << i << ", step " << step;
    }
    ref.params = fast.params;  // the next step from the same parameters
  }
  EXPECT_GT(largest_step, 0.0f);
  EXPECT_LT(largest_difference, 1e-6f);
}

TEST(AdamW, SameBitsForAnyCutAndThreadCount) {
  const size_t n = 50000;
  const auto g = random_grads(n, 3);
  AdamState whole = random_state(n, 9);
  AdamState cut = whole, one_thread = whole;
  adamw_update(whole.params.data(), g.data(), whole.m.data(), whole.v.data(), n, kConfig, kConfig.lr, 3, 1.0f,
               true);
  // As ZeRO shards cut it: uneven pieces, one not a multiple of a vector width.
  for (auto [begin, end] : {std::pair<size_t, size_t>{0, 13}, {13, 20000}, {20000, n}})
    adamw_update(cut.params.data() + begin, g.data() + begin, cut.m.data() + begin, cut.v.data() + begin,
                 end - begin, kConfig, kConfig.lr, 3, 1.0f, true);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  adamw_update(one_thread.params.data(), g.data(), one_thread.m.data(), one_thread.v.data(), n, kConfig,
               kConfig.lr, 3, 1.0f, true);
  omp_set_num_threads(threads);
  for (const AdamState* s : {&cut, &one_thread}) {
    EXPECT_TRUE(same_bits(s->params, whole.params));
    EXPECT_TRUE(same_bits(s->m, whole.m));
    EXPECT_TRUE(same_bits(s->v, whole.v));
  }
}
