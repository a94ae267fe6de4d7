// Per-group quantize / dequantize loops. Each group (at most a few thousand floats) is brought into a
// per-thread scratch buffer once (difference, sum of parts, Hadamard transform), then scanned for
// finiteness and absmax and quantized while it sits in L1/L2: one pass over memory per call. Threads
// split the groups; every output byte and scale belongs to exactly one group, and the random numbers
// are addressed by element index, so the result does not depend on the thread count.
#include "odyssey/kernels/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/kernels/hadamard.h"
#include "odyssey/kernels/parallel_min.h"

namespace odyssey {

namespace {

void check_format(const QuantFormat& f, size_t n, const char* what) {
  ODY_CHECK(f.bits == 8 || f.bits == 4, "{}: bits must be 8 or 4, got {}", what, f.bits);
  ODY_CHECK(f.group > 0, "{}: group size must be positive", what);
  ODY_CHECK(f.bits == 8 || f.group % 2 == 0, "{}: int4 group size {} must be even so groups start on a byte",
            what, f.group);
  if (f.hadamard) {
    ODY_CHECK(f.group % 32 == 0, "{}: with the Hadamard transform the group size {} must be a multiple of 32",
              what, f.group);
    ODY_CHECK(n % 32 == 0,
              "{}: with the Hadamard transform the length {} must be a multiple of 32 (pad the bucket)", what,
              n);
  }
}

// Per-thread buffers for one group.
struct Scratch {
  std::vector<float> values, uniforms;
  std::vector<int8_t> q;
  explicit Scratch(size_t group) : values(group), uniforms(group), q(group) {}
};

// The first (lowest) group found holding a non-finite value, across threads.
struct NonFinite {
  size_t group = SIZE_MAX, element = 0;
  float value = 0.0f;

  void note(size_t g, size_t first_element, const float* v, size_t len) {
    size_t i = 0;
    while (i < len && std::isfinite(v[i])) ++i;
#pragma omp critical(odyssey_quantize_nonfinite)
    if (g < group) {
      group = g;
      element = first_element + i;
      value = v[i];
    }
  }

  void raise(const char* what, size_t n, const QuantFormat& f, const RoundingKey& key) const {
    if (group == SIZE_MAX) return;
    fail(
        "{}: non-finite value {} at element {} of group {} (elements [{}, {}) of {}{}; bucket {}, step {}, "
        "rank {}): NaN or Inf in the input, or an overflow in the difference or transform",
        what, value, element, group, group * f.group, std::min(n, (group + 1) * f.group), n,
        f.hadamard ? ", Hadamard domain" : "", key.bucket, key.step, key.rank);
  }
};

void pack_int4(const int8_t* q, size_t len, uint8_t* out) {
  const size_t pairs = len / 2;
#pragma omp simd
  for (size_t k = 0; k < pairs; ++k) out[k] = uint8_t((q[2 * k] << 4) | (q[2 * k + 1] & 0xF));
  if (len % 2) out[pairs] = uint8_t(q[len - 1] << 4);
}

// Quantizes the values v[0..len) of group g, whose first element is element `first`, into out.
// Returns false (writing nothing) if a value is not finite.
bool quantize_group(const float* v, size_t len, size_t g, size_t first, int bits, Rounding rounding,
                    const RoundingKey& key, Scratch& scratch, Quantized out) {
  float amax = 0.0f;
  int bad = 0;
#pragma omp simd reduction(max : amax) reduction(| : bad)
  for (size_t i = 0; i < len; ++i) {
    const float a = std::fabs(v[i]);
    amax = std::max(amax, a);
    bad |= !(a <= FLT_MAX);  // NaN compares false
  }
  if (bad) return false;

  const float levels = float(quant_levels(bits));
  const float s = levels / amax;
  uint8_t* bytes = out.data + (bits == 8 ? first : first / 2);
  const size_t nbytes = bits == 8 ? len : (len + 1) / 2;
  if (!(s <= FLT_MAX)) {  // amax == 0, or so small that levels / amax overflows: all zeros
    std::memset(bytes, 0, nbytes);
    out.scales[g] = 1.0f;
    return true;
  }
  out.scales[g] = 1.0f / s;

  int8_t* q = bits == 8 ? reinterpret_cast<int8_t*>(bytes) : scratch.q.data();
  if (rounding == Rounding::kNearest) {
#pragma omp simd
    for (size_t i = 0; i < len; ++i) {
      const float t = std::nearbyint(v[i] * s);
      q[i] = int8_t(std::clamp(t, -levels, levels));
    }
  } else {
    float* u = scratch.uniforms.data();
    rounding_uniforms(key, first, len, u);
#pragma omp simd
    for (size_t i = 0; i < len; ++i) {
      // floor(t) spelled through nearbyint: g++ vectorizes floorf only under -fno-trapping-math.
      const float t = v[i] * s, nearest = std::nearbyint(t), lower = nearest > t ? nearest - 1.0f : nearest;
      const float r = lower + (u[i] < t - lower ? 1.0f : 0.0f);  // up with probability t - lower
      q[i] = int8_t(std::clamp(r, -levels, levels));
    }
  }
  if (bits == 4) pack_int4(q, len, bytes);
  return true;
}

// out[i] = v̂[b + i] (or += when kAdd) for i < e - b: the raw decoded values, still in the Hadamard domain
// if the format has one. Walks the groups of f that overlap [b, e); for int4, b must be even. The
// accumulation is an explicit fma: g++ would contract q * scale + o on its own where the target has FMA,
// so spelling it out keeps the result the same on every target and compiler setting.
template <bool kAdd>
void decode_range(ConstQuantized in, const QuantFormat& f, size_t b, size_t e, float* out) {
  for (size_t lo = b; lo < e;) {
    const size_t g = lo / f.group, hi = std::min(e, (g + 1) * f.group), len = hi - lo;
    const float scale = in.scales[g];
    float* o = out + (lo - b);
    if (f.bits == 8) {
      const int8_t* q = reinterpret_cast<const int8_t*>(in.data) + lo;
#pragma omp simd
      for (size_t i = 0; i < len; ++i) {
        o[i] = kAdd ? std::fma(float(q[i]), scale, o[i]) : float(q[i]) * scale;
      }
    } else {
      const int8_t* p = reinterpret_cast<const int8_t*>(in.data) + lo / 2;
      const size_t pairs = len / 2;
#pragma omp simd
      for (size_t k = 0; k < pairs; ++k) {
        const float even = float(p[k] >> 4), odd = float(int8_t(p[k] << 4) >> 4);  // sign-extended nibbles
        o[2 * k] = kAdd ? std::fma(even, scale, o[2 * k]) : even * scale;
        o[2 * k + 1] = kAdd ? std::fma(odd, scale, o[2 * k + 1]) : odd * scale;
      }
      if (len % 2) {
        const float last = float(p[pairs] >> 4);
        o[len - 1] = kAdd ? std::fma(last, scale, o[len - 1]) : last * scale;
      }
    }
    lo = hi;
  }
}

// x <- H32 x / 32 blockwise: back from the Hadamard domain. len is a multiple of 32.
void inverse_hadamard(float* x, size_t len) {
  for (size_t i = 0; i < len; i += 32) hadamard32_block(x + i);
#pragma omp simd
  for (size_t i = 0; i < len; ++i) x[i] *= 0.03125f;
}

// Runs body(g, first, len, scratch) for every group of size `group` over n elements, threads splitting
// the groups.
template <typename Body>
void for_each_group(size_t n, size_t group, size_t scratch_size, Body&& body) {
  const size_t groups = (n + group - 1) / group;
#pragma omp parallel if (n >= kParallelMinElements)
  {
    Scratch scratch(scratch_size);
#pragma omp for schedule(static)
    for (size_t g = 0; g < groups; ++g) {
      const size_t first = g * group;
      body(g, first, std::min(group, n - first), scratch);
    }
  }
}

void check_key(Rounding rounding, const RoundingKey& key, size_t n, const char* what) {
  if (rounding == Rounding::kStochastic)
    ODY_CHECK(key.offset + n <= kRoundingIndexLimit, "{}: element indices up to {} exceed the limit 2^36",
              what, key.offset + n);
}

// Shared by quantize and quantize_diff: load(first, len, scratch) returns the group's values, either in
// place in the input or written into scratch.values.
template <typename Load>
void quantize_with(const char* what, size_t n, const QuantFormat& f, Rounding rounding,
                   const RoundingKey& key, Quantized out, Load&& load) {
  check_format(f, n, what);
  check_key(rounding, key, n, what);
  NonFinite nonfinite;
  for_each_group(n, f.group, f.group, [&](size_t g, size_t first, size_t len, Scratch& scratch) {
    const float* v = load(first, len, scratch);
    if (f.hadamard) {  // transform on the way into scratch (or in place there)
      float* h = scratch.values.data();
      for (size_t i = 0; i < len; i += 32) hadamard32_block(v + i, h + i);
      v = h;
    }
    if (!quantize_group(v, len, g, first, f.bits, rounding, key, scratch, out))
      nonfinite.note(g, first, v, len);
  });
  nonfinite.raise(what, n, f, key);
}

}  // namespace

size_t quantized_bytes(const QuantFormat& f, size_t n) {
  return f.bits == 8 ? n : (n + 1) / 2;
}

size_t quantized_groups(const QuantFormat& f, size_t n) {
  return (n + f.group - 1) / f.group;
}

void quantize(const float* x, size_t n, const QuantFormat& f, Rounding rounding, const RoundingKey& key,
              Quantized out) {
  quantize_with("quantize", n, f, rounding, key, out,
                [x](size_t first, size_t, Scratch&) { return x + first; });
}

void quantize_diff(const float* a, const float* b, size_t n, const QuantFormat& f, Rounding rounding,
                   const RoundingKey& key, Quantized out) {
  quantize_with("quantize_diff", n, f, rounding, key, out, [a, b](size_t first, size_t len, Scratch& s) {
    float* d = s.values.data();
#pragma omp simd
    for (size_t i = 0; i < len; ++i) d[i] = a[first + i] - b[first + i];
    return static_cast<const float*>(d);
  });
}

void dequantize(ConstQuantized in, size_t n, const QuantFormat& f, float* out) {
  check_format(f, n, "dequantize");
  for_each_group(n, f.group, 0, [&](size_t, size_t first, size_t len, Scratch&) {
    decode_range<false>(in, f, first, first + len, out + first);
    if (f.hadamard) inverse_hadamard(out + first, len);
  });
}

void dequantize_add(ConstQuantized in, size_t n, const QuantFormat& f, float* dst) {
  check_format(f, n, "dequantize_add");
  if (!f.hadamard) {
    for_each_group(n, f.group, 0, [&](size_t, size_t first, size_t len, Scratch&) {
      decode_range<true>(in, f, first, first + len, dst + first);
    });
    return;
  }
  for_each_group(n, f.group, f.group, [&](size_t, size_t first, size_t len, Scratch& scratch) {
    float* v = scratch.values.data();
    decode_range<false>(in, f, first, first + len, v);
    inverse_hadamard(v, len);
    float* d = dst + first;
#pragma omp simd
    for (size_t i = 0; i < len; ++i) d[i] += v[i];
  });
}

void dequantize_sum(std::span<const ConstQuantized> parts, size_t n, const QuantFormat& f, float* out) {
  check_format(f, n, "dequantize_sum");
  ODY_CHECK(!parts.empty(), "dequantize_sum: no parts to sum");
  for_each_group(n, f.group, 0, [&](size_t, size_t first, size_t len, Scratch&) {
    decode_range<false>(parts[0], f, first, first + len, out + first);
    for (size_t k = 1; k < parts.size(); ++k)
      decode_range<true>(parts[k], f, first, first + len, out + first);
    if (f.hadamard) inverse_hadamard(out + first, len);  // once, after the sum
  });
}

void dequantize_sum_quantize(std::span<const ConstQuantized> parts, size_t n, const QuantFormat& in,
                             const QuantFormat& out_format, Rounding rounding, const RoundingKey& key,
                             Quantized out) {
  const char* what = "dequantize_sum_quantize";
  check_format(in, n, what);
  check_format(out_format, n, what);
  check_key(rounding, key, n, what);
  ODY_CHECK(!parts.empty(), "{}: no parts to sum", what);
  ODY_CHECK(in.bits == 8 || out_format.group % 2 == 0,
            "{}: int4 input needs an even output group size, got {}", what, out_format.group);
  NonFinite nonfinite;
  for_each_group(n, out_format.group, out_format.group, [&](size_t g, size_t first, size_t len, Scratch& s) {
    float* v = s.values.data();
    decode_range<false>(parts[0], in, first, first + len, v);
    for (size_t k = 1; k < parts.size(); ++k) decode_range<true>(parts[k], in, first, first + len, v);
    if (in.hadamard && !out_format.hadamard) inverse_hadamard(v, len);
    if (!in.hadamard && out_format.hadamard)
      for (size_t i = 0; i < len; i += 32) hadamard32_block(v + i);
    if (!quantize_group(v, len, g, first, out_format.bits, rounding, key, s, out))
      nonfinite.note(g, first, v, len);
  });
  nonfinite.raise(what, n, out_format, key);
}

}  // namespace odyssey
