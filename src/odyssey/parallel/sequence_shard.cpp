#include "odyssey/parallel/sequence_shard.h"

#include <algorithm>

#include "odyssey/core/error.h"

namespace odyssey {

std::vector<RingRun> ring_runs(RingLayout layout, int R, int r, int Tr) {
  if (layout == RingLayout::zigzag && R > 1) {
    const int c = Tr / 2;
    return {{int64_t(r) * c, 0, c}, {int64_t(2 * R - 1 - r) * c, c, c}};
  }
  return {{int64_t(r) * Tr, 0, Tr}};
}

void check_sequence_shard(int T, const SequenceShard& s) {
  ODY_CHECK(s.ulysses >= 1 && s.ring >= 1,
            "sequence parallel sizes must be positive (sp_ulysses={}, sp_ring={})", s.ulysses, s.ring);
  ODY_CHECK(s.ulysses_rank >= 0 && s.ulysses_rank < s.ulysses && s.ring_rank >= 0 && s.ring_rank < s.ring,
            "sequence shard ranks ({}, {}) outside sp_ulysses={} x sp_ring={}", s.ulysses_rank, s.ring_rank,
            s.ulysses, s.ring);
  const int U = s.ulysses, R = s.ring;
  if (s.layout == RingLayout::zigzag && R > 1) {
    ODY_CHECK(
        T % (2 * R) == 0 && (T / R) % U == 0,
        "sequence length {} cannot be split zigzag over sp_ring={} x sp_ulysses={}: it must be a multiple "
        "of 2*sp_ring={} and T/sp_ring a multiple of sp_ulysses (e.g. a multiple of {})",
        T, R, U, 2 * R, 2 * R * U);
  } else {
    ODY_CHECK(T % (R * U) == 0, "sequence length {} is not a multiple of sp_ulysses x sp_ring = {} x {} = {}",
              T, U, R, U * R);
  }
}

std::vector<int> shard_positions(int T, const SequenceShard& s) {
  check_sequence_shard(T, s);
  const int R = s.ring, U = s.ulysses, Tr = T / R;
  // The ring rank's tokens in local order.
  std::vector<int> ring_tokens(static_cast<size_t>(Tr));
  for (const RingRun& run : ring_runs(s.layout, R, s.ring_rank, Tr))
    for (int i = 0; i < run.len; ++i) ring_tokens[size_t(run.offset + i)] = int(run.start) + i;
  const int Tl = Tr / U, c = s.chunk > 0 && s.chunk < Tl ? s.chunk : Tl;
  std::vector<int> mine(static_cast<size_t>(Tl));
  for (int k = 0; k * c < Tl; ++k) {
    const int m = std::min(c, Tl - k * c);  // this chunk's tokens on every rank
    for (int o = 0; o < m; ++o)
      mine[size_t(k * c + o)] = ring_tokens[size_t(U * k * c + s.ulysses_rank * m + o)];
  }
  return mine;
}

void shard_rows(int32_t* dst, const int32_t* src, int B, int T, const std::vector<int>& positions) {
  const int Tl = int(positions.size());
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tl; ++i) {
      ODY_CHECK(positions[size_t(i)] >= 0 && positions[size_t(i)] < T,
                "shard position {} outside a row of {}", positions[size_t(i)], T);
      dst[int64_t(b) * Tl + i] = src[int64_t(b) * T + positions[size_t(i)]];
    }
}

}  // namespace odyssey
