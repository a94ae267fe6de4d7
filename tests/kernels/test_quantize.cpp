// Per-group quantization: bit-exact against a scalar reference written from the format in
// quantize.h (and hand-computed bytes), error bounds, unbiased and reproducible stochastic rounding,
// the fused loops against compositions of the plain ones, and NaN/Inf refused.
#include "odyssey/kernels/quantize.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"
#include "odyssey/kernels/hadamard.h"
#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

struct Packed {
  std::vector<uint8_t> data;
  std::vector<float> scales;
  Packed(const QuantFormat& f, size_t n)
      : data(quantized_bytes(f, n), 0xAB), scales(quantized_groups(f, n), -1) {}
  Quantized view() { return {data.data(), scales.data()}; }
  ConstQuantized cview() const { return {data.data(), scales.data()}; }
};

// The uniform for bucket index `index`, from core/rng.h's scalar Philox (not the kernel's lanes).
float reference_uniform(const RoundingKey& key, uint64_t index) {
  const uint64_t seed = key.seed ^ kRoundingSeedTag;
  const auto w = philox4x32({uint32_t(16 * (index / 64) + index % 16), key.bucket, key.step, key.rank},
                            {uint32_t(seed), uint32_t(seed >> 32)});
  return float(w[(index / 16) % 4] >> 8) * (1.0f / 16777216.0f);
}

// The format of quantize.h, one element at a time.
Packed reference_quantize(std::vector<float> x, const QuantFormat& f, Rounding rounding,
                          const RoundingKey& key) {
  const size_t n = x.size();
  if (f.hadamard)
    for (size_t b = 0; b < n; b += 32)
      for (int h = 1; h < 32; h *= 2)  // the spec's butterflies
        for (int i = 0; i < 32; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            const float a = x[b + j], c = x[b + j + h];
            x[b + j] = a + c;
            x[b + j + h] = a - c;
          }
  Packed out(f, n);
  std::vector<int> q(n);
  const int levels = f.bits == 8 ? 127 : 7;
  for (size_t g = 0; g * f.group < n; ++g) {
    const size_t lo = g * f.group, hi = std::min(n, lo + f.group);
    float amax = 0.0f;
    for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = float(levels) / amax;
    if (std::isinf(s)) {
      out.scales[g] = 1.0f;
      for (size_t i = lo; i < hi; ++i) q[i] = 0;
      continue;
    }
    out.scales[g] = 1.0f / s;
    for (size_t i = lo; i < hi; ++i) {
      const float t = x[i] * s;
      float r;
      if (rounding == Rounding::kNearest) {
        r = std::nearbyint(t);
      } else {
        r = std::floor(t);
        if (reference_uniform(key, key.offset + i) < t - r) r += 1.0f;
      }
      q[i] = std::clamp(int(r), -levels, levels);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (f.bits == 8) {
      out.data[i] = uint8_t(int8_t(q[i]));
    } else {
      const int shift = i % 2 == 0 ? 4 : 0;  // even index -> high nibble
      if (i % 2 == 0) out.data[i / 2] = 0;
      out.data[i / 2] |= uint8_t((q[i] & 0xF) << shift);
    }
  }
  return out;
}

Packed run_quantize(const std::vector<float>& x, const QuantFormat& f, Rounding r, const RoundingKey& key) {
  Packed p(f, x.size());
  quantize(x.data(), x.size(), f, r, key, p.view());
  return p;
}

std::vector<float> run_dequantize(const Packed& p, size_t n, const QuantFormat& f) {
  std::vector<float> out(n, -7.0f);
  dequantize(p.cview(), n, f, out.data());
  return out;
}

void expect_same(const Packed& got, const Packed& want, const std::string& what) {
  ASSERT_EQ(got.data.size(), want.data.size()) << what;
  for (size_t i = 0; i < want.data.size(); ++i)
    ASSERT_EQ(int(got.data[i]), int(want.data[i])) << what << ": byte " << i;
  ASSERT_EQ(got.scales.size(), want.scales.size()) << what;
  for (size_t g = 0; g < want.scales.size(); ++g)
    ASSERT_EQ(got.scales[g], want.scales[g]) << what << ": scale " << g;
}

// The integer stored for element i, read straight from the format.
float stored_int(const Packed& p, int bits, size_t i) {
  if (bits == 8) return float(int8_t(p.data[i]));
  const int nibble = i % 2 == 0 ? p.data[i / 2] >> 4 : p.data[i / 2] & 0xF;
  return float(nibble >= 8 ? nibble - 16 : nibble);
}

// Random values with some outliers and an all-zero group, so groups have very different scales.
std::vector<float> test_values(size_t n, uint32_t seed) {
  auto x = random_floats(n, seed, -1.0f, 1.0f);
  for (size_t i = 0; i < n; i += 97) x[i] *= 50.0f;
  for (size_t i = std::min<size_t>(n, 256); i < std::min<size_t>(n, 384); ++i) x[i] = 0.0f;
  return x;
}

const RoundingKey kKey{.seed = 1234, .step = 7, .rank = 3, .bucket = 2, .offset = 0};

// ---- the random numbers ----

TEST(RoundingRandom, LanesMatchScalarPhilox) {
  for (uint64_t first : {0, 1, 3, 5, 61, 64, 1000}) {
    for (size_t count : {1, 3, 4, 63, 64, 65, 300}) {
      RoundingKey key = kKey;
      key.offset = 17;
      std::vector<float> u(count);
      rounding_uniforms(key, first, count, u.data());
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(u[i], reference_uniform(key, key.offset + first + i)) << first << " " << count << " " << i;
    }
  }
}

TEST(RoundingRandom, IndexLimitIsChecked) {
  RoundingKey key = kKey;
  key.offset = kRoundingIndexLimit - 2;
  float u[4];
  EXPECT_NO_THROW(rounding_uniforms(key, 0, 2, u));
  EXPECT_THROW(rounding_uniforms(key, 0, 3, u), Error);
}

// ---- exact format ----

// Hand-computed: values chosen so v·s is exact, including the ties that round to even.
TEST(Quantize, HandComputedInt4) {
  const QuantFormat f{.bits = 4, .group = 4};
  // group 0: amax 1.75, s = 4: 7, -1.5 -> -2, 2.5 -> 2, 0.  group 1 (tail of 3): amax 3.5, s = 2: -7, 2, 1.
  std::vector<float> x = {1.75f, -0.375f, 0.625f, 0.0f, -3.5f, 1.0f, 0.5f};
  auto p = run_quantize(x, f, Rounding::kNearest, kKey);
  EXPECT_EQ(p.data, (std::vector<uint8_t>{0x7E, 0x20, 0x92, 0x10}));
  EXPECT_EQ(p.scales, (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ(run_dequantize(p, x.size(), f),
            (std::vector<float>{1.75f, -0.5f, 0.5f, 0.0f, -3.5f, 1.0f, 0.5f}));
}

TEST(Quantize, HandComputedInt8) {
  const QuantFormat f{.bits = 8, .group = 3};
  // group 0: amax 1, s = 127: -127, 63.5 -> 64, 31.75 -> 32.  group 1: all zero -> scale 1.
  std::vector<float> x = {-1.0f, 0.5f, 0.25f, 0.0f, 0.0f};
  auto p = run_quantize(x, f, Rounding::kNearest, kKey);
  EXPECT_EQ(p.data, (std::vector<uint8_t>{0x81, 0x40, 0x20, 0x00, 0x00}));
  EXPECT_EQ(p.scales, (std::vector<float>{1.0f / 127.0f, 1.0f}));
  auto y = run_dequantize(p, x.size(), f);
  EXPECT_EQ(y[0], -127.0f * (1.0f / 127.0f));
  EXPECT_EQ(y[3], 0.0f);
}

// Every nibble value decodes with its sign: 16 values -7..7 (and -8, which the quantizer never makes).
TEST(Quantize, NibblesAreTwosComplementHighFirst) {
  const QuantFormat f{.bits = 4, .group = 16};
  std::vector<uint8_t> bytes;
  for (int q = -8; q < 8; q += 2) bytes.push_back(uint8_t(((q & 0xF) << 4) | ((q + 1) & 0xF)));
  const float scale = 1.0f;
  std::vector<float> out(16);
  dequantize({bytes.data(), &scale}, 16, f, out.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], float(i - 8)) << i;
}

TEST(Quantize, BitExactAgainstReference) {
  for (int bits : {8, 4}) {
    for (size_t group : {size_t{32}, size_t{128}, size_t{2048}, size_t{6}}) {
      for (bool hadamard : {false, true}) {
        if (hadamard && group % 32) continue;
        for (size_t n : {size_t{1}, size_t{7}, size_t{32}, size_t{96}, size_t{4097}, size_t{70001},
                         size_t{65536 + 160}}) {
          if (hadamard && n % 32) continue;
          for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
            const QuantFormat f{.bits = bits, .group = group, .hadamard = hadamard};
            auto x = test_values(n, uint32_t(n + group));
            const std::string what = fmt::format("bits {} group {} hadamard {} n {} stochastic {}", bits,
                                                 group, hadamard, n, r == Rounding::kStochastic);
            expect_same(run_quantize(x, f, r, kKey), reference_quantize(x, f, r, kKey), what);
          }
        }
      }
    }
  }
}

// Groups of tiny values: amax 1e-38 makes 7 / amax overflow, so the group is stored as zeros; a
// subnormal-free small group (1e-30) quantizes normally.
TEST(Quantize, TinyGroups) {
  const QuantFormat f{.bits = 4, .group = 4};
  std::vector<float> x = {1e-38f, -1e-38f, 0.0f, 5e-39f, 1e-30f, -0.5e-30f, 0.25e-30f, 0.0f};
  auto p = run_quantize(x, f, Rounding::kNearest, kKey);
  expect_same(p, reference_quantize(x, f, Rounding::kNearest, kKey), "tiny");
  EXPECT_EQ(p.scales[0], 1.0f);
  EXPECT_EQ(p.data[0], 0);
  EXPECT_EQ(p.data[1], 0);
  auto y = run_dequantize(p, x.size(), f);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[4], 1e-30f, 1e-36f);
}

// ---- error bounds ----

// |x - deQ(Q(x))| <= scale / 2 for nearest and < scale for stochastic rounding, with scale the group's
// (plus fp32 slack). With the Hadamard transform the bound holds on H x per group, and H / 32 has
// max-row-sum 1, so it holds on x with the largest scale among the groups the block's values touch.
TEST(Quantize, RoundTripErrorWithinBound) {
  const size_t n = 50016;  // a multiple of 32, not of the group sizes
  auto x = test_values(n, 5);
  for (int bits : {8, 4}) {
    for (size_t group : {size_t{128}, size_t{2048}}) {
      for (bool hadamard : {false, true}) {
        for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
          const QuantFormat f{.bits = bits, .group = group, .hadamard = hadamard};
          auto p = run_quantize(x, f, r, kKey);
          auto y = run_dequantize(p, n, f);
          const double factor = r == Rounding::kNearest ? 0.5 : 1.0;
          double worst = 0.0;
          for (size_t i = 0; i < n; ++i) {
            const double scale = p.scales[i / group];
            const double bound = factor * scale * (1 + 1e-5) + 1e-6 * std::fabs(x[i]);
            const double err = std::fabs(double(y[i]) - x[i]);
            worst = std::max(worst, err / scale);
            ASSERT_LE(err, bound) << "bits " << bits << " group " << group << " hadamard " << hadamard
                                  << " i " << i;
          }
          EXPECT_GT(worst, 0.1 * factor);  // the bound is not vacuous
        }
      }
    }
  }
}

// ---- stochastic rounding ----

// One value drawn 1e5 times: with s·v = l + f (0 < f < 1) every draw errs by -f·scale or (1-f)·scale, so
// the mean error has sigma = scale·sqrt(f(1-f)/N); require |mean| < 4 sigma. Draws vary the element
// index (one call) and, separately, the step (many calls at one index). Nearest rounding, by contrast,
// errs by the same amount every time.
TEST(StochasticRounding, Unbiased) {
  constexpr size_t kDraws = 100000;
  for (int bits : {8, 4}) {
    for (float v : {0.3f, -0.61f, 0.05f}) {
      const QuantFormat f{.bits = bits, .group = 1024};
      // Every group: element 0 = 1 (amax), the rest = v.
      const size_t per_group = f.group - 1, groups = (kDraws + per_group - 1) / per_group;
      std::vector<float> x(groups * f.group, v);
      for (size_t g = 0; g < groups; ++g) x[g * f.group] = 1.0f;
      auto p = run_quantize(x, f, Rounding::kStochastic, kKey);
      auto y = run_dequantize(p, x.size(), f);
      const double scale = p.scales[0];
      const double t = double(v) / scale, frac = t - std::floor(t);
      const double sigma_one = scale * std::sqrt(frac * (1 - frac));
      double sum = 0.0;
      size_t count = 0;
      for (size_t i = 0; i < x.size() && count < kDraws; ++i) {
        if (i % f.group == 0) continue;
        sum += double(y[i]) - v;
        ++count;
      }
      const double sigma = sigma_one / std::sqrt(double(count));
      EXPECT_LT(std::fabs(sum / count), 4 * sigma) << "bits " << bits << " v " << v << " across indices";

      // The same element over many steps (a 2-element call: amax 1 and v).
      double sum_steps = 0.0;
      std::vector<float> pair = {1.0f, v};
      const QuantFormat small{.bits = bits, .group = 2};
      for (uint32_t step = 0; step < kDraws; ++step) {
        RoundingKey key = kKey;
        key.step = step;
        uint8_t bytes[2];
        float s;
        quantize(pair.data(), 2, small, Rounding::kStochastic, key, {bytes, &s});
        float out[2];
        dequantize({bytes, &s}, 2, small, out);
        sum_steps += double(out[1]) - v;
      }
      EXPECT_LT(std::fabs(sum_steps / kDraws), 4 * sigma_one / std::sqrt(double(kDraws)))
          << "bits " << bits << " v " << v << " across steps";

      auto yn = run_dequantize(run_quantize(x, f, Rounding::kNearest, kKey), x.size(), f);
      EXPECT_GT(std::fabs(double(yn[1]) - v), 10 * sigma) << "nearest rounding should be visibly biased here";
    }
  }
}

TEST(StochasticRounding, ReproducibleAndKeyed) {
  const QuantFormat f{.bits = 4, .group = 128};
  auto x = test_values(10000, 9);
  const auto base = run_quantize(x, f, Rounding::kStochastic, kKey);
  expect_same(run_quantize(x, f, Rounding::kStochastic, kKey), base, "same key");
  auto differs = [&](RoundingKey key) {
    return run_quantize(x, f, Rounding::kStochastic, key).data != base.data;
  };
  RoundingKey k = kKey;
  k.seed += 1;
  EXPECT_TRUE(differs(k)) << "seed";
  k = kKey;
  k.step += 1;
  EXPECT_TRUE(differs(k)) << "step";
  k = kKey;
  k.rank += 1;
  EXPECT_TRUE(differs(k)) << "rank";
  k = kKey;
  k.bucket += 1;
  EXPECT_TRUE(differs(k)) << "bucket";
  k = kKey;
  k.offset += 1;
  EXPECT_TRUE(differs(k)) << "offset";
}

// A bucket quantized in group-aligned pieces with matching offsets equals the bucket quantized whole
// (how a swizzled all-to-all quantizes per destination).
TEST(StochasticRounding, PiecesEqualWhole) {
  const QuantFormat f{.bits = 8, .group = 256, .hadamard = true};
  const size_t n = 256 * 12;
  auto x = test_values(n, 10);
  const auto whole = run_quantize(x, f, Rounding::kStochastic, kKey);
  for (size_t piece = 0; piece < 3; ++piece) {
    const size_t len = n / 3, first = piece * len;
    RoundingKey key = kKey;
    key.offset = first;
    Packed p(f, len);
    quantize(x.data() + first, len, f, Rounding::kStochastic, key, p.view());
    for (size_t i = 0; i < len; ++i) ASSERT_EQ(p.data[i], whole.data[first + i]) << piece << " " << i;
    for (size_t g = 0; g < len / f.group; ++g) ASSERT_EQ(p.scales[g], whole.scales[first / f.group + g]);
  }
}

TEST(Quantize, IndependentOfThreadCount) {
  const QuantFormat f{.bits = 4, .group = 128, .hadamard = true};
  auto x = test_values(1 << 18, 14);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  auto one = run_quantize(x, f, Rounding::kStochastic, kKey);
  omp_set_num_threads(std::max(2, saved));
  auto many = run_quantize(x, f, Rounding::kStochastic, kKey);
  omp_set_num_threads(saved);
  expect_same(many, one, "threads");
}

// ---- fused loops against compositions of the plain ones ----

TEST(Quantize, DiffEqualsQuantizeOfDifference) {
  const QuantFormat f{.bits = 4, .group = 2048};
  const size_t n = 2048 * 3 + 100;
  auto a = test_values(n, 20), b = random_floats(n, 21);
  std::vector<float> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = a[i] - b[i];
  Packed p(f, n);
  quantize_diff(a.data(), b.data(), n, f, Rounding::kStochastic, kKey, p.view());
  expect_same(p, run_quantize(d, f, Rounding::kStochastic, kKey), "diff");
}

TEST(Dequantize, AddAndSumMatchComposition) {
  const size_t n = 128 * 40 + 64;
  for (int bits : {8, 4}) {
    for (bool hadamard : {false, true}) {
      const QuantFormat f{.bits = bits, .group = 128, .hadamard = hadamard};
      const QuantFormat raw{.bits = bits, .group = 128};  // same bytes, read without the transform
      std::vector<Packed> parts;
      for (uint32_t k = 0; k < 3; ++k)
        parts.push_back(run_quantize(test_values(n, 30 + k), f, Rounding::kStochastic, kKey));
      std::vector<ConstQuantized> views;
      for (auto& p : parts) views.push_back(p.cview());

      // dst += deQ(part 0): an fma of the stored integer and scale, or an add of the transformed values.
      auto dst = random_floats(n, 40);
      auto expected = dst;
      auto y0 = run_dequantize(parts[0], n, f);
      for (size_t i = 0; i < n; ++i)
        expected[i] = hadamard
                          ? expected[i] + y0[i]
                          : std::fma(stored_int(parts[0], bits, i), parts[0].scales[i / 128], expected[i]);
      dequantize_add(views[0], n, f, dst.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], expected[i]) << "add bits " << bits << " " << i;

      // Σ in part order, in the quantized domain, one inverse transform at the end.
      auto sum = run_dequantize(parts[0], n, raw);
      for (size_t k = 1; k < parts.size(); ++k)
        for (size_t i = 0; i < n; ++i)
          sum[i] = std::fma(stored_int(parts[k], bits, i), parts[k].scales[i / 128], sum[i]);
      if (hadamard) {
        hadamard32(sum.data(), n);
        for (auto& v : sum) v *= 0.03125f;
      }
      std::vector<float> out(n);
      dequantize_sum(views, n, f, out.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], sum[i]) << "sum bits " << bits << " " << i;
    }
  }
}

// TLq step C: Σ of 8-bit parts requantized to 4 bits without leaving the Hadamard domain.
TEST(Dequantize, SumQuantizeMatchesComposition) {
  const size_t n = 128 * 33;
  for (bool hadamard : {false, true}) {
    const QuantFormat in{.bits = 8, .group = 128, .hadamard = hadamard};
    const QuantFormat out_format{.bits = 4, .group = 128, .hadamard = hadamard};
    std::vector<Packed> parts;
    for (uint32_t k = 0; k < 2; ++k)
      parts.push_back(run_quantize(test_values(n, 50 + k), in, Rounding::kStochastic, kKey));
    std::vector<ConstQuantized> views = {parts[0].cview(), parts[1].cview()};
    const QuantFormat in_raw{.bits = 8, .group = 128}, out_raw{.bits = 4, .group = 128};
    std::vector<float> sum(n);
    dequantize_sum(views, n, in_raw, sum.data());
    RoundingKey key = kKey;
    key.step = 99;
    Packed fused(out_format, n);
    dequantize_sum_quantize(views, n, in, out_format, Rounding::kStochastic, key, fused.view());
    expect_same(fused, run_quantize(sum, out_raw, Rounding::kStochastic, key), "sum-quantize");
  }
  // Different group sizes and a change of domain (8-bit H-domain in, plain 4-bit out).
  const QuantFormat in{.bits = 8, .group = 64, .hadamard = true}, out_format{.bits = 4, .group = 256};
  std::vector<Packed> parts;
  for (uint32_t k = 0; k < 2; ++k)
    parts.push_back(run_quantize(test_values(n, 60 + k), in, Rounding::kNearest, kKey));
  std::vector<ConstQuantized> views = {parts[0].cview(), parts[1].cview()};
  std::vector<float> sum(n);
  dequantize_sum(views, n, in, sum.data());
  Packed fused(out_format, n);
  dequantize_sum_quantize(views, n, in, out_format, Rounding::kNearest, kKey, fused.view());
  expect_same(fused, run_quantize(sum, out_format, Rounding::kNearest, kKey), "regrouped");
}

// The two-level path of spec §1.4 on W = 4 simulated ranks (2 nodes × 2), gradients with 0.2% outliers
// at 50×: relative error of the reduced sum in the spec's range (§6.3 reports 0.14-0.45), and the
// Hadamard smoothing helps.
TEST(Dequantize, TwoLevelWithOutliersHadamardHelps) {
  const size_t n = 128 * 256;
  std::vector<std::vector<float>> g;
  for (uint32_t r = 0; r < 4; ++r) {
    auto x = random_floats(n, 70 + r);
    for (size_t i = r; i < n; i += 500) x[i] *= 50.0f;
    g.push_back(x);
  }
  std::vector<double> exact(n, 0.0);
  for (auto& x : g)
    for (size_t i = 0; i < n; ++i) exact[i] += x[i];
  auto relative_error = [&](bool hadamard) {
    const QuantFormat q8{.bits = 8, .group = 128, .hadamard = hadamard},
        q4{.bits = 4, .group = 128, .hadamard = hadamard};
    std::vector<Packed> node_sums;
    for (uint32_t node = 0; node < 2; ++node) {
      std::vector<Packed> local;
      for (uint32_t l = 0; l < 2; ++l) {
        RoundingKey key = kKey;
        key.rank = node * 2 + l;
        local.push_back(run_quantize(g[node * 2 + l], q8, Rounding::kStochastic, key));
      }
      std::vector<ConstQuantized> views = {local[0].cview(), local[1].cview()};
      Packed sum(q4, n);
      RoundingKey key = kKey;
      key.rank = node;
      dequantize_sum_quantize(views, n, q8, q4, Rounding::kStochastic, key, sum.view());
      node_sums.push_back(std::move(sum));
    }
    std::vector<ConstQuantized> views = {node_sums[0].cview(), node_sums[1].cview()};
    std::vector<float> out(n);
    dequantize_sum(views, n, q4, out.data());
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; ++i) {
      num += (out[i] - exact[i]) * (out[i] - exact[i]);
      den += exact[i] * exact[i];
    }
    return std::sqrt(num / den);
  };
  const double plain = relative_error(false), smoothed = relative_error(true);
  EXPECT_LT(smoothed, plain);
  EXPECT_LT(smoothed, 0.5);
  EXPECT_LT(plain, 1.0);
}

// ---- refusals ----

TEST(Quantize, NonFiniteIsRefusedNamingTheGroup) {
  const QuantFormat f{.bits = 4, .group = 64};
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    auto x = random_floats(1000, 80);
    x[3 * 64 + 5] = bad;
    x[9 * 64] = bad;  // a later group: the first one is named
    Packed p(f, x.size());
    try {
      quantize(x.data(), x.size(), f, Rounding::kStochastic, kKey, p.view());
      FAIL() << "no error for " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("group 3 "), std::string::npos) << msg;
      EXPECT_NE(msg.find("element 197"), std::string::npos) << msg;
      EXPECT_NE(msg.find("bucket 2"), std::string::npos) << msg;
    }
  }
  // Finite inputs whose difference overflows.
  std::vector<float> a(64, 3e38f), b(64, -3e38f);
  Packed p(f, 64);
  EXPECT_THROW(quantize_diff(a.data(), b.data(), 64, f, Rounding::kNearest, kKey, p.view()), Error);
  // A NaN reaching the requantization of a sum.
  const QuantFormat f8{.bits = 8, .group = 64};
  Packed part(f8, 64);
  std::vector<float> ones(64, 1.0f);
  quantize(ones.data(), 64, f8, Rounding::kNearest, kKey, part.view());
  part.scales[0] = std::nanf("");
  ConstQuantized view = part.cview();
  EXPECT_THROW(dequantize_sum_quantize({&view, 1}, 64, f8, f, Rounding::kNearest, kKey, p.view()), Error);
}

TEST(Quantize, BadFormatsAreRefused) {
  std::vector<float> x(64, 1.0f);
  Packed p(QuantFormat{.bits = 8, .group = 64}, 64);
  EXPECT_THROW(quantize(x.data(), 64, {.bits = 3, .group = 64}, Rounding::kNearest, kKey, p.view()), Error);
  EXPECT_THROW(quantize(x.data(), 64, {.bits = 4, .group = 7}, Rounding::kNearest, kKey, p.view()), Error);
  EXPECT_THROW(
      quantize(x.data(), 64, {.bits = 8, .group = 48, .hadamard = true}, Rounding::kNearest, kKey, p.view()),
      Error);
  EXPECT_THROW(
      quantize(x.data(), 40, {.bits = 8, .group = 64, .hadamard = true}, Rounding::kNearest, kKey, p.view()),
      Error);
  RoundingKey key = kKey;
  key.offset = kRoundingIndexLimit - 10;
  EXPECT_THROW(quantize(x.data(), 64, {.bits = 8, .group = 64}, Rounding::kStochastic, key, p.view()), Error);
  EXPECT_NO_THROW(quantize(x.data(), 64, {.bits = 8, .group = 64}, Rounding::kNearest, key, p.view()));
  EXPECT_NO_THROW(quantize(x.data(), 0, {.bits = 4, .group = 64}, Rounding::kStochastic, kKey, p.view()));
}

}  // namespace
