#include "odyssey/parallel/wire_format.h"

#include <cstring>
#include <vector>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

const float* as_floats(ConstQuantized q) {
  return reinterpret_cast<const float*>(q.data);
}
float* as_floats(Quantized q) {
  return reinterpret_cast<float*>(q.data);
}

}  // namespace

void wire_encode(const WireFormat& f, const float* x, size_t n, const RoundingKey& key, Quantized out) {
  if (f.identity) {
    if (n) std::memcpy(out.data, x, n * sizeof(float));
    return;
  }
  quantize(x, n, f.quant, f.rounding, key, out);
}

void wire_encode_diff(const WireFormat& f, const float* a, const float* b, size_t n, const RoundingKey& key,
                      Quantized out) {
  if (f.identity) {
    float* o = as_floats(out);
    for (size_t i = 0; i < n; ++i) o[i] = a[i] - b[i];
    return;
  }
  quantize_diff(a, b, n, f.quant, f.rounding, key, out);
}

void wire_decode(const WireFormat& f, ConstQuantized in, size_t n, float* out) {
  if (f.identity) {
    if (n) std::memcpy(out, in.data, n * sizeof(float));
    return;
  }
  dequantize(in, n, f.quant, out);
}

void wire_decode_add(const WireFormat& f, ConstQuantized in, size_t n, float* dst) {
  if (f.identity) {
    const float* v = as_floats(in);
    for (size_t i = 0; i < n; ++i) dst[i] += v[i];
    return;
  }
  dequantize_add(in, n, f.quant, dst);
}

void wire_decode_sum(const WireFormat& f, std::span<const ConstQuantized> parts, size_t n, float* out) {
  ODY_CHECK(!parts.empty(), "wire_decode_sum: no parts");
  if (!f.identity) return dequantize_sum(parts, n, f.quant, out);
  std::memcpy(out, parts[0].data, n * sizeof(float));
  for (size_t k = 1; k < parts.size(); ++k) {
    const float* v = as_floats(parts[k]);
    for (size_t i = 0; i < n; ++i) out[i] += v[i];
  }
}

void wire_decode_sum_encode(const WireFormat& in, std::span<const ConstQuantized> parts, size_t n,
                            const WireFormat& out_format, const RoundingKey& key, Quantized out) {
  ODY_CHECK(in.identity == out_format.identity, "wire_decode_sum_encode: identity must match on both hops");
  if (!in.identity)
    return dequantize_sum_quantize(parts, n, in.quant, out_format.quant, out_format.rounding, key, out);
  wire_decode_sum(in, parts, n, as_floats(out));
}

}  // namespace odyssey
