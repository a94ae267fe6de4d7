#include "odyssey/kernels/rope.h"

#include <cmath>

namespace odyssey {

std::vector<float> rope_inv_freq(int D, double theta, const RopeScalingParams& s) {
  const int half = D / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  // As HF: 1 / (base ** (arange(0, D, 2).float() / D)), in fp32.
  for (int i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] =
        1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / float(D));
  if (!s.llama3) return inv;
  // Llama-3: wavelengths above orig / low_freq_factor are divided by factor, those below
  // orig / high_freq_factor kept, and those between interpolated smoothly (fp32, as HF).
  const float factor = float(s.factor), low = float(s.low_freq_factor), high = float(s.high_freq_factor);
  const float orig = float(s.original_max_position_embeddings);
  const float low_wavelen = orig / low, high_wavelen = orig / high;
  const float pi = 3.14159265358979323846f;
  for (float& f : inv) {
    const float wavelen = 2 * pi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = f / factor;
      continue;
    }
    const float smooth = (orig / wavelen - low) / (high - low);
    f = (1 - smooth) * f / factor + smooth * f;
  }
  return inv;
}

void rope_tables(float* cos, float* sin, const int* positions, int N, const float* inv_freq, int D) {
  const int half = D / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[n]) * inv_freq[i];  // fp32, as HF
      cos[static_cast<size_t>(n) * half + i] = std::cos(angle);
      sin[static_cast<size_t>(n) * half + i] = std::sin(angle);
    }
}

namespace {

// Rotates every head of every token by +angle (sign 1) or -angle (sign -1).
void rotate(float* x, int64_t row_stride, int N, int heads, int D, const float* cos, const float* sin,
            float sign) {
  const int half = D / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* c = cos + static_cast<size_t>(n) * half;
    const float* s = sin + static_cast<size_t>(n) * half;
    for (int h = 0; h < heads; ++h) {
      float* lo = x + n * row_stride + static_cast<int64_t>(h) * D;
      float* hi = lo + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i], si = sign * s[i];
        lo[i] = a * c[i] - b * si;
        hi[i] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, int64_t row_stride, int N, int heads, int D, const float* cos, const float* sin) {
  rotate(x, row_stride, N, heads, D, cos, sin, 1.0f);
}

void rope_backward(float* dx, int64_t row_stride, int N, int heads, int D, const float* cos,
                   const float* sin) {
  rotate(dx, row_stride, N, heads, D, cos, sin, -1.0f);
}

}  // namespace odyssey
