// Symmetric per-group quantization for compressed collectives (SDP4Bit qWD and TLq-HS, ZeRO++ qwZ and
// qgZ). The exact format, spec §1.2 and §10:
//
//   groups   elements [g·G, min((g+1)·G, n)) for g < ceil(n / G); the last group may be short.
//   levels   L = 127 for int8, L = 7 for int4 (15 levels: SDP4Bit found the 16th hurts convergence).
//   scale    amax = max |v| over the group; s = L / amax (fp32); stored scale = 1.0f / s (fp32), one
//            per group, in a separate array. A group with amax == 0 (or so small, < ~L / FLT_MAX, that
//            s overflows) is stored as all zeros with scale 1.0f.
//   values   q = clamp(round(v · s), -L, L), round = nearest (ties to even) or stochastic:
//            floor(v·s) + (u < v·s - floor(v·s)), u from rounding_uniforms (24 bits).
//   int8     byte i = q[i], two's complement.
//   int4     two's-complement nibbles, element 2k in the HIGH nibble, 2k+1 in the low one (SDP4Bit's
//            layout): byte k = (q[2k] << 4) | (q[2k+1] & 0xF). ceil(n/2) bytes; when n is odd the last
//            low nibble is 0. G must be even, so every group starts on a byte (byte g·G/2).
//   decode   v̂ = q · scale; decodes that accumulate compute fma(q, scale, acc) (one rounding).
//
// With `hadamard` on, the buffer holds the quantization of H32 v (blockwise, hadamard.h): quantize
// transforms before taking amax, and every decode to real values applies H32 and ×1/32. Buffers summed
// in that domain need only one inverse after the sum (spec §1.4 "operation pruning"), which
// dequantize_sum and dequantize_sum_quantize do. Requires G % 32 == 0 and n % 32 == 0 (pad the bucket).
//
// Non-finite values: every group is checked (after the difference and the transform, i.e. on the
// values actually quantized) before its scale is computed. If any group holds NaN or ±Inf the call
// throws odyssey::Error naming the first such group, element, value and the key's bucket/step/rank; the
// outputs are then unspecified. Never a scale computed from NaN: one NaN would poison the whole group.
//
// Results depend only on the inputs and the key, never on the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "odyssey/kernels/rounding_random.h"

namespace odyssey {

struct QuantFormat {
  int bits = 8;           // 8 or 4
  size_t group = 128;     // elements per scale
  bool hadamard = false;  // values are quantized in the H32 domain
};

enum class Rounding { kNearest, kStochastic };

// A packed buffer: quantized_bytes(f, n) bytes of values and quantized_groups(f, n) fp32 scales.
struct Quantized {
  uint8_t* data;
  float* scales;
};
struct ConstQuantized {
  const uint8_t* data;
  const float* scales;
};

inline int quant_levels(int bits) {
  return bits == 8 ? 127 : 7;
}
size_t quantized_bytes(const QuantFormat& f, size_t n);
size_t quantized_groups(const QuantFormat& f, size_t n);

// out = Q(x). `key` is used only for stochastic rounding.
void quantize(const float* x, size_t n, const QuantFormat& f, Rounding rounding, const RoundingKey& key,
              Quantized out);
// out = Q(a - b), the difference taken in fp32 (qWD: new master shard minus current model weights).
void quantize_diff(const float* a, const float* b, size_t n, const QuantFormat& f, Rounding rounding,
                   const RoundingKey& key, Quantized out);

// out = deQ(in).
void dequantize(ConstQuantized in, size_t n, const QuantFormat& f, float* out);
// dst += deQ(in) (qWD: every rank adds every shard's dequantized difference to its model weights):
// dst = fma(q, scale, dst) without the transform; dst + H32(q · scale) / 32 with it.
void dequantize_add(ConstQuantized in, size_t n, const QuantFormat& f, float* dst);
// out = Σ_k deQ(parts[k]), summed in fp32 in part order (out = q0 · scale0, then fma per further part);
// in the Hadamard domain when f.hadamard, with one inverse transform after the sum (TLq-HS step E).
// At least one part.
void dequantize_sum(std::span<const ConstQuantized> parts, size_t n, const QuantFormat& f, float* out);
// out = Q_out(Σ_k deQ_in(parts[k])) group by group, with no full-size fp32 intermediate (TLq step C: sum
// the 8-bit parts from the node, requantize to 4 bits). When both formats use the Hadamard domain the
// sum stays in it (no transform); otherwise the sum is moved to out's domain. For int4 input the
// output group size must be even.
void dequantize_sum_quantize(std::span<const ConstQuantized> parts, size_t n, const QuantFormat& in,
                             const QuantFormat& out_format, Rounding rounding, const RoundingKey& key,
                             Quantized out);

}  // namespace odyssey
