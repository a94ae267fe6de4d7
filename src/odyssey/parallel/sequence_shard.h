// Which tokens of a row a sequence-parallel rank holds (DESIGN.md: SP ranks split each row's
// sequence, in zigzag order where the ring is used). Applied once when the batch is sliced, to
// tokens, targets and positions alike, so every rank's tokens carry their global positions.
//
// A row of T tokens over R ring ranks and U Ulysses ranks (P = U * R):
//   zigzag (R > 1): the row is cut into 2R chunks of T / 2R; ring rank r holds chunks r and 2R-1-r,
//                   in that order, which balances causal work around the ring;
//   contiguous:     ring rank r holds [r T / R, (r + 1) T / R).
// Ulysses rank u then takes the u-th of U contiguous pieces of its ring rank's tokens, so that the
// Ulysses all-to-all (which concatenates the pieces in Ulysses rank order) rebuilds exactly the
// ring rank's tokens. With R = 1 both layouts are the contiguous split.
//
// Dealt by chunk (`chunk` > 0, query-chunked Ulysses, long-context-memory.md §4.8): the Tl = T / (U R)
// tokens of a Ulysses rank run in chunks of `chunk` (the last may be short), and local chunk k of
// every rank (m tokens) is the u-th m-piece of the ring rank's tokens [U k chunk, U k chunk + U m), so
// the all-to-all of chunk k rebuilds that contiguous segment. With chunk >= Tl (or 0): the split above.
//
// Divisibility (checked, the error names the sizes):
//   zigzag, R > 1: T % 2R == 0 and (T / R) % U == 0   (T % lcm(2R, R U) == 0; 2RU always works)
//   otherwise:     T % (R U) == 0
#pragma once

#include <cstdint>
#include <vector>

#include "odyssey/core/enum_names.h"

namespace odyssey {

enum class RingLayout { contiguous, zigzag };
inline constexpr EnumNames<RingLayout, 2> kRingLayoutNames = {
    {{"zigzag", RingLayout::zigzag}, {"contiguous", RingLayout::contiguous}}};

struct SequenceShard {
  int ulysses = 1, ring = 1;            // group sizes
  int ulysses_rank = 0, ring_rank = 0;  // this rank's place in them
  RingLayout layout = RingLayout::zigzag;
  int chunk = 0;  // tokens per chunk dealt to each Ulysses rank (0: contiguous pieces)

  int ranks() const { return ulysses * ring; }
};

// The ring layout's rule, written once (the batch's slicing and ring attention's steps follow it): the
// runs of a row's tokens that ring rank r of R holds, Tr of them, in local order: [r Tr, (r+1) Tr)
// (contiguous, or R = 1), or under zigzag the chunks r and 2R-1-r of Tr / 2 tokens each.
struct RingRun {
  int64_t start;    // the run's first token in the row
  int offset, len;  // its first token in the rank's local order, and its tokens
};
std::vector<RingRun> ring_runs(RingLayout layout, int R, int r, int Tr);

// Fails (odyssey::Error) when a row of T tokens cannot be split this way.
void check_sequence_shard(int T, const SequenceShard& s);

// Global positions of this rank's T / (U R) tokens, in local order (GPT2::forward's `positions`).
std::vector<int> shard_positions(int T, const SequenceShard& s);

// dst [B, Tl] = src[b, positions[i]] for a [B, T] array (tokens or targets), Tl = positions.size().
void shard_rows(int32_t* dst, const int32_t* src, int B, int T, const std::vector<int>& positions);

}  // namespace odyssey
