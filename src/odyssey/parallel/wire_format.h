// What a compressed collective puts on the wire for a block of n floats: a quantized buffer
// (kernels/quantize.h) or, for tests, the fp32 values themselves. The identity mode runs the very
// same collectives (same partitions, same swizzle, same sums in fp32) with nothing rounded, so a
// quantized path can be checked against the uncompressed run to summation order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "odyssey/kernels/quantize.h"

namespace odyssey {

struct WireFormat {
  QuantFormat quant;
  Rounding rounding = Rounding::kStochastic;
  bool identity = false;  // test only: fp32 values pass through, no scales

  size_t bytes(size_t n) const { return identity ? n * sizeof(float) : quantized_bytes(quant, n); }
  size_t groups(size_t n) const { return identity ? 0 : quantized_groups(quant, n); }
  // Layout alignment a block needs (Hadamard blocks of 32; int4 groups start on a byte).
  size_t align() const { return identity ? 1 : quant.hadamard ? 32 : 2; }
};

// `count` encoded blocks of n floats each, back to back in one buffer so that one message carries a
// block's values and its scales (spec §10: "scales could also be packed inline"): record i holds the
// values, padded to 4 bytes, then the fp32 scales. Halves the collectives of every compressed path.
class WireBlocks {
 public:
  WireBlocks() = default;
  WireBlocks(const WireFormat& f, size_t n, size_t count)
      : values_(values_bytes(f, n)),
        groups_(f.groups(n)),
        record_(values_ + 4 * groups_),
        words_(record_ / 4 * count) {}
  // What WireBlocks(f, n, count) allocates, without allocating (the footprint counts by it).
  static size_t bytes_for(const WireFormat& f, size_t n, size_t count) {
    return (values_bytes(f, n) + 4 * f.groups(n)) * count;
  }
  // Bytes of one block on the wire.
  size_t record_bytes() const { return record_; }
  size_t size_bytes() const { return words_.size() * 4; }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(words_.data()); }
  Quantized block(size_t i) {
    uint8_t* r = data() + i * record_;
    return {r, reinterpret_cast<float*>(r + values_)};
  }
  ConstQuantized cblock(size_t i) const {
    const uint8_t* r = data() + i * record_;
    return {r, reinterpret_cast<const float*>(r + values_)};
  }

 private:
  static size_t values_bytes(const WireFormat& f, size_t n) { return (f.bytes(n) + 3) / 4 * 4; }
  size_t values_ = 0, groups_ = 0, record_ = 0;
  std::vector<float> words_;  // float storage keeps every record's scales 4-byte aligned
};

// out = E(x), and out = E(a - b) (weight differences).
void wire_encode(const WireFormat& f, const float* x, size_t n, const RoundingKey& key, Quantized out);
void wire_encode_diff(const WireFormat& f, const float* a, const float* b, size_t n, const RoundingKey& key,
                      Quantized out);
// out = D(in); dst += D(in).
void wire_decode(const WireFormat& f, ConstQuantized in, size_t n, float* out);
void wire_decode_add(const WireFormat& f, ConstQuantized in, size_t n, float* dst);
// out = Σ_k D(parts[k]) in fp32, in part order.
void wire_decode_sum(const WireFormat& f, std::span<const ConstQuantized> parts, size_t n, float* out);
// out = E_out(Σ_k D_in(parts[k])): sum the parts of one hop and re-encode them for the next.
void wire_decode_sum_encode(const WireFormat& in, std::span<const ConstQuantized> parts, size_t n,
                            const WireFormat& out_format, const RoundingKey& key, Quantized out);

}  // namespace odyssey
