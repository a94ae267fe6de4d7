// Quantizer throughput on 64 MB of fp32 (16 Mi elements), printed as one JSON object on stdout:
// quantize and dequantize, int8 and int4, with and without the fused Hadamard transform, nearest and
// stochastic rounding, plus the fused loops the collectives use (qWD diff-quantize and dequantize-add,
// TLq step C sum-requantize, step E sum + inverse transform).
//   fp32_gbps    fp32 bytes of the tensor per second (the figure of SDP4Bit's Table 5);
//   traffic_gbps all bytes each call must move (fp32 in/out, packed values, scales) per second.
// Also a plain memcpy of the fp32 tensor as the machine's bandwidth yardstick, measured in the same run.
// Usage: bench_quantize [seconds per measurement, default 0.5]. Threads follow OMP_NUM_THREADS.
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "odyssey/core/rng.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/quantize.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;

namespace {

double g_seconds = 0.5;
constexpr size_t kN = size_t{16} << 20;  // 64 MB of fp32

template <typename F>
double time_per_call(F&& f) {
  f();
  Timer timer;
  int calls = 0;
  do {
    f();
    ++calls;
  } while (timer.seconds() < g_seconds || calls < 3);
  return timer.seconds() / calls;
}

struct Packed {
  std::vector<uint8_t> data;
  std::vector<float> scales;
  explicit Packed(const QuantFormat& f) : data(quantized_bytes(f, kN)), scales(quantized_groups(f, kN)) {}
  Quantized view() { return {data.data(), scales.data()}; }
  ConstQuantized cview() const { return {data.data(), scales.data()}; }
};

double packed_bytes(const QuantFormat& f) {
  return double(quantized_bytes(f, kN)) + 4.0 * double(quantized_groups(f, kN));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_seconds = std::atof(argv[1]);
  std::vector<float> x(kN), y(kN), w(kN);
  philox_fill_normal(x.data(), kN, 0.0f, 1.0f, 1, 1);
  philox_fill_normal(w.data(), kN, 0.0f, 1.0f, 1, 2);
  const RoundingKey key{.seed = 1, .step = 1, .rank = 0, .bucket = 0, .offset = 0};
  std::vector<std::string> rows;
  auto row = [&](std::string name, const QuantFormat& f, double seconds, double traffic) {
    rows.push_back(fmt::format(
        R"({{"op": "{}", "bits": {}, "group": {}, "hadamard": {}, "ms": {:.3f}, "fp32_gbps": {:.2f}, "traffic_gbps": {:.2f}}})",
        name, f.bits, f.group, f.hadamard, seconds * 1e3, 4.0 * kN / seconds / 1e9, traffic / seconds / 1e9));
  };

  const double memcpy_s = time_per_call([&] { std::memcpy(y.data(), x.data(), 4 * kN); });

  for (int bits : {8, 4}) {
    for (bool hadamard : {false, true}) {
      const QuantFormat f{.bits = bits, .group = 128, .hadamard = hadamard};
      Packed p(f);
      for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
        const double s = time_per_call([&] { quantize(x.data(), kN, f, r, key, p.view()); });
        row(r == Rounding::kNearest ? "quantize_nearest" : "quantize_stochastic", f, s,
            4.0 * kN + packed_bytes(f));
      }
      const double s = time_per_call([&] { dequantize(p.cview(), kN, f, y.data()); });
      row("dequantize", f, s, 4.0 * kN + packed_bytes(f));
    }
  }

  // qWD: 4-bit weight differences in groups of 2048, stochastic as in SDP4Bit.
  {
    const QuantFormat f{.bits = 4, .group = 2048};
    Packed p(f);
    const double q = time_per_call(
        [&] { quantize_diff(x.data(), w.data(), kN, f, Rounding::kStochastic, key, p.view()); });
    row("quantize_diff_stochastic", f, q, 8.0 * kN + packed_bytes(f));
    const double a = time_per_call([&] { dequantize_add(p.cview(), kN, f, y.data()); });
    row("dequantize_add", f, a, 8.0 * kN + packed_bytes(f));
  }

  // TLq-HS with two parts per level: step C (8-bit H-domain parts -> 4-bit) and step E (sum + inverse H).
  {
    const QuantFormat q8{.bits = 8, .group = 128, .hadamard = true},
        q4{.bits = 4, .group = 128, .hadamard = true};
    Packed a(q8), b(q8), c(q4), d(q4);
    quantize(x.data(), kN, q8, Rounding::kStochastic, key, a.view());
    quantize(w.data(), kN, q8, Rounding::kStochastic, key, b.view());
    const ConstQuantized parts8[] = {a.cview(), b.cview()};
    const double sq = time_per_call(
        [&] { dequantize_sum_quantize(parts8, kN, q8, q4, Rounding::kStochastic, key, c.view()); });
    row("dequantize_sum_quantize_2parts_to_int4", q8, sq, 2 * packed_bytes(q8) + packed_bytes(q4));
    quantize(w.data(), kN, q4, Rounding::kStochastic, key, d.view());
    const ConstQuantized parts4[] = {c.cview(), d.cview()};
    const double ds = time_per_call([&] { dequantize_sum(parts4, kN, q4, y.data()); });
    row("dequantize_sum_2parts", q4, ds, 2 * packed_bytes(q4) + 4.0 * kN);
  }

  fmt::print(
      "{{\n  \"host\": {},\n  \"threads\": {},\n  \"elements\": {},\n  \"memcpy_gbps\": {:.2f},\n  "
      "\"kernels\": [\n",
      odyssey::host_json().dump(), omp_get_max_threads(), kN, 8.0 * kN / memcpy_s / 1e9);
  for (size_t i = 0; i < rows.size(); ++i) fmt::print("    {}{}\n", rows[i], i + 1 < rows.size() ? "," : "");
  fmt::print("  ]\n}}\n");
  return 0;
}
