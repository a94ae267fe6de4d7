// Shared by the sequence-parallel tests: every (sp_ulysses, sp_ring, ring layout) of a world of P
// ranks, and seeded data that every rank draws identically (so each can build the single-process
// reference and slice it).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "odyssey/parallel/sequence_shard.h"

namespace odyssey::sp_test {

struct Layout {
  int U, R;
  RingLayout layout;
  std::string name() const { return fmt::format("U{}xR{}-{}", U, R, enum_name(kRingLayoutNames, layout)); }
};

// All factorisations U x R = P; both layouts when the ring has more than one rank.
inline std::vector<Layout> layouts(int P) {
  std::vector<Layout> out;
  for (int U = 1; U <= P; ++U) {
    if (P % U) continue;
    const int R = P / U;
    out.push_back({U, R, RingLayout::zigzag});
    if (R > 1) out.push_back({U, R, RingLayout::contiguous});
  }
  return out;
}

inline std::vector<float> uniform(size_t n, uint32_t seed, float amplitude) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// B rows of T random tokens below vocab with their targets; every target whose index i satisfies
// i % mask_period == mask_at is -1 (not counted). count: the counted targets.
struct Batch {
  std::vector<int> inputs, targets;
  int64_t count = 0;
};

inline Batch random_batch(int B, int T, int vocab, uint32_t seed, int mask_period, int mask_at) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back(tok(gen));
    b.targets.push_back(i % mask_period == mask_at ? -1 : tok(gen));
    b.count += b.targets.back() >= 0;
  }
  return b;
}

}  // namespace odyssey::sp_test
