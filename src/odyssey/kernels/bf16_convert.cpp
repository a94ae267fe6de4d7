// Dispatch of the bf16 conversion paths (bf16_convert_isa.h), the portable path, and the parallel
// bulk conversions.
#include "odyssey/kernels/bf16_convert.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "odyssey/core/error.h"
#include "odyssey/kernels/bf16_convert_isa.h"
#include "odyssey/kernels/bf16_convert_lanes.h"
#include "odyssey/kernels/isa_choice.h"

namespace odyssey {

namespace bf16_paths {
using PortableLanes = bf16_lanes::Lanes<4>;
constinit const Bf16ConvertPath portable{"portable", &PortableLanes::nearest, &PortableLanes::stochastic,
                                         &PortableLanes::widen};
}  // namespace bf16_paths

const std::vector<Bf16ConvertPathSupport>& bf16_convert_paths() {
  static const std::vector<Bf16ConvertPathSupport> paths = [] {
    std::vector<Bf16ConvertPathSupport> p;
#if ODYSSEY_BF16_X86_PATHS
    const CpuInfo& cpu = cpu_info();
    p.push_back({&bf16_paths::avx512_bf16, cpu.avx512f && cpu.avx512_bf16});
    p.push_back({&bf16_paths::avx512, cpu.avx512f});
    p.push_back({&bf16_paths::avx2, cpu.avx2});
#endif
    p.push_back({&bf16_paths::portable, true});
    return p;
  }();
  return paths;
}

namespace {

// The widest path this CPU runs, or the one ODYSSEY_BF16_ISA names.
const Bf16ConvertPath& choose_path() {
  return choose_isa_path(bf16_convert_paths(), "ODYSSEY_BF16_ISA", "a bf16 conversion path");
}

// Calls below this size run on the calling thread; larger ones split into pieces of whole 128-element
// Philox chunks (not needed for the bits, which do not depend on the split, but it keeps a chunk's
// random words computed once).
constexpr size_t kParallelMin = size_t{1} << 16;
constexpr size_t kPiece = size_t{1} << 14;

template <class Convert>
void in_pieces(size_t n, Convert convert) {
  if (n < kParallelMin || omp_in_parallel() || omp_get_max_threads() == 1) return convert(0, n);
  const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) {
    const size_t begin = size_t(p) * kPiece;
    convert(begin, std::min(n, begin + kPiece) - begin);
  }
}

}  // namespace

const Bf16ConvertPath& bf16_convert_path() {
  static const Bf16ConvertPath& path = choose_path();
  return path;
}

void convert_to_bf16(const float* x, bf16* y, size_t n) {
  const auto nearest = bf16_convert_path().nearest;
  in_pieces(n, [&](size_t at, size_t count) { nearest(x + at, y + at, count); });
}

void convert_to_bf16_stochastic(const float* x, bf16* y, size_t n, const Bf16RoundingKey& key) {
  const auto stochastic = bf16_convert_path().stochastic;
  in_pieces(n, [&](size_t at, size_t count) {
    Bf16RoundingKey piece = key;
    piece.offset = key.offset + at;
    stochastic(x + at, y + at, count, piece);
  });
}

void convert_to_float(const bf16* x, float* y, size_t n) {
  const auto widen = bf16_convert_path().widen;
  in_pieces(n, [&](size_t at, size_t count) { widen(x + at, y + at, count); });
}

}  // namespace odyssey
