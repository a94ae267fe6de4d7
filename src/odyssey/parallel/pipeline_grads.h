// What a pipeline adds to a step's gradients after its stages' reductions (spec §3.6, §3.7): the tied
// embedding's two copies (the first stage's embedding matrix, the last stage's LM head) summed over
// the embedding group, and the global gradient norm over every stage, each tied copy counted once.
#pragma once

#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/zero.h"

namespace odyssey {

// Which elements of a sum over a group travel: the members hold the same element runs of the ranges
// (the same table layout and ZeRO partition: only those travel), or possibly different ones (the tied
// copies of the first and last pipeline stage, each stage partitioned on its own: the ranges travel
// whole, zeros where a member holds nothing).
enum class HeldRuns { same, differ };

// The dense elements whose reduced gradients a ZeRO engine of `stage` over `part` holds
// (ZeroEngine::reduced_grad_runs without the storage): stage 0 every segment, else this rank's shard's
// valid part of each.
std::vector<Range> reduced_grad_ranges(const Partition& part, int stage);

// The elements sum_gradient_ranges sends per message for `tensors` given the rank's reduced-gradient
// runs: the held pieces (HeldRuns::same) or the whole ranges (differ), cut into segments of at most 4M
// elements and packed while a message stays within it. Its scratch holds the largest.
std::vector<uint64_t> gradient_sum_messages(std::vector<Range> runs, const std::vector<Range>& tensors,
                                            HeldRuns held);

// Sums the engine's reduced gradients of the dense ranges `tensors` of its table over `group`, in
// place on every member, in messages of at most 4M elements packed from scratch (reused space the
// caller keeps). Collective over group.
void sum_gradient_ranges(ZeroEngine& engine, const std::vector<Range>& tensors, Communicator& group,
                         HeldRuns held, FloatBuffer& scratch);

// The tied copies' reduced gradients added over embd (spec §3.7): the members are the ranks of the
// first and last stage that hold the copy's elements (ZeRO 0: the two ranks with this rank's
// data-parallel coordinates, each holding the whole gradient; ZeRO >= 1: both stages' whole
// data-parallel groups, each rank its shard). tensor: the copy's dense range in the engine's table.
// Each element is the sum of exactly two non-zero terms (the rest add zeros), so every member gets the
// same bits. Collective over embd.
inline void sum_tied_gradient(ZeroEngine& engine, Range tensor, Communicator& embd, FloatBuffer& scratch) {
  sum_gradient_ranges(engine, {tensor}, embd, HeldRuns::differ, scratch);
}

// sqrt of the sum of squares of every stage's reduced gradients: per engine over its data-parallel
// shards, then over each group of `across` in order (pp: the stages; tp: the tensor-parallel pieces);
// skip[c] lists dense ranges of engine c left out (the last stage's tied copy: the first stage counts
// it; a replicated tensor on all tp ranks but one). The same on every rank. Collective over the
// engines' groups and `across`.
double engines_grad_norm(const std::vector<ZeroEngine*>& engines, const std::vector<std::vector<Range>>& skip,
                         const std::vector<Communicator*>& across);

}  // namespace odyssey
