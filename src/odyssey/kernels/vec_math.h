// A vectorizable expf. glibc's vector expf/tanhf are only declared under -ffast-math, so without it
// g++ leaves a scalar call in every loop that needs an exponential (softmax, GELU's tanh). This one
// is plain arithmetic and bit operations and inlines into `#pragma omp simd` loops.
// Accuracy: relative error below 2^-23 (about 0.65 FLT_EPSILON measured) over the normal range;
// tanh below 2e-7 absolute (checked in test_cross_entropy).
#pragma once

#include <bit>
#include <cstdint>

namespace odyssey {

// e^x = 2^n e^r with n = round(x / ln2) and |r| <= ln2 / 2; e^r from its degree-7 Taylor polynomial
// (truncation error below 1e-8 relative on that interval). Returns 0 below ~-87.3 (where the result
// would be subnormal) and saturates at ~88.7 (just under FLT_MAX).
inline float vexp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln2 split so n * kLn2Hi is exact for |n| <= 128
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const bool underflow = x < -87.33f;
  x = x > 88.72f ? 88.72f : x;
  x = x < -87.33f ? -87.33f : x;
  float n = (x * kLog2e + kRound) - kRound;
  float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n by building the exponent field; n is in [-126, 128]. n = 128 is split as 2 * 2^127.
  int32_t ni = static_cast<int32_t>(n);
  int32_t half = ni >> 1;
  float scale_a = std::bit_cast<float>((half + 127) << 23);
  float scale_b = std::bit_cast<float>((ni - half + 127) << 23);
  float result = p * scale_a * scale_b;
  return underflow ? 0.0f : result;
}

// tanh(x) = 1 - 2 / (e^{2x} + 1): absolute error ~1e-7, which is what GELU and its gradient need.
inline float vtanh(float x) {
  return 1.0f - 2.0f / (vexp(2.0f * x) + 1.0f);
}

// sum over i < n of e^(x[i] - m) (softmax's normaliser; m >= every x[i] keeps each term <= 1), each term
// also stored to e[i] when e is given (e may be x). Summed in 16 float lanes over blocks of 128 terms,
// each block's lanes added in double, in a fixed order: a double accumulator does not vectorize with g++
// (6x slower over GPT-2's vocabulary), and one float sum over 50257 terms drifts by ~1e-5 relative, while
// 8 terms per lane keep it near 1e-8.
inline double sum_exp_shifted(const float* x, int64_t n, float m, float* e = nullptr) {
  constexpr int kLanes = 16, kSteps = 8;
  double sum = 0.0;
  int64_t i = 0;
  for (; i + kLanes * kSteps <= n; i += kLanes * kSteps) {
    float lanes[kLanes] = {};
    for (int s = 0; s < kSteps; ++s) {
      const float* xs = x + i + s * kLanes;
      float* es = e ? e + i + s * kLanes : nullptr;
      if (es) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) lanes[l] += es[l] = vexp(xs[l] - m);
      } else {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) lanes[l] += vexp(xs[l] - m);
      }
    }
    double block = 0.0;
    for (int l = 0; l < kLanes; ++l) block += lanes[l];
    sum += block;
  }
  for (; i < n; ++i) {
    const float t = vexp(x[i] - m);
    if (e) e[i] = t;
    sum += t;
  }
  return sum;
}

}  // namespace odyssey
