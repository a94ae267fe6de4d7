#include "odyssey/parallel/pipeline_grads.h"

#include <algorithm>
#include <cmath>

#include "odyssey/core/buffer.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/reductions.h"

namespace odyssey {

void sum_reduced_gradients(ZeroEngine& engine, const std::vector<Range>& tensors, Communicator& group) {
  const std::vector<ZeroEngine::GradRun> runs = engine.reduced_grad_runs();
  // This rank's elements of the tensors, packed in table order, in pieces of at most 4M elements (a
  // large vocabulary needs no second full-size buffer).
  struct Piece {
    float* grads;
    int64_t n;
  };
  std::vector<Piece> pieces;
  for (const Range& tensor : tensors)
    for (const ZeroEngine::GradRun& run : runs) {
      const Range mine = intersect({run.begin, run.end}, tensor);
      if (!mine.empty()) pieces.push_back({run.grads + (mine.begin - run.begin), mine.size()});
    }
  constexpr int64_t kPiece = int64_t(1) << 22;
  FloatBuffer packed;
  for (size_t i = 0; i < pieces.size();) {
    // Pieces [i, j) packed together, up to kPiece elements (a larger single piece alone).
    size_t j = i;
    int64_t n = 0;
    while (j < pieces.size() && (j == i || n + pieces[j].n <= kPiece)) n += pieces[j++].n;
    float* buf = packed.at_least(size_t(n));
    int64_t at = 0;
    for (size_t k = i; k < j; ++k) std::copy_n(pieces[k].grads, pieces[k].n, buf + at), at += pieces[k].n;
    group.all_reduce(buf, size_t(n), DType::f32);
    at = 0;
    for (size_t k = i; k < j; ++k) std::copy_n(buf + at, pieces[k].n, pieces[k].grads), at += pieces[k].n;
    i = j;
  }
}

void sum_tied_gradient(ZeroEngine& engine, Range tensor, Communicator& embd) {
  // A rank of the first stage and one of the last may hold different runs of the tensor (ZeRO >= 1
  // partitions each stage's table on its own): the tensor goes over embd whole, zeros where not held.
  const std::vector<ZeroEngine::GradRun> runs = engine.reduced_grad_runs();
  constexpr int64_t kPiece = int64_t(1) << 22;
  FloatBuffer piece(size_t(std::min(kPiece, tensor.size())));
  for (int64_t at = tensor.begin; at < tensor.end; at += kPiece) {
    const Range part{at, std::min(at + kPiece, tensor.end)};
    std::fill_n(piece.data(), part.size(), 0.0f);
    for (const ZeroEngine::GradRun& run : runs) {
      const Range mine = intersect({run.begin, run.end}, part);
      if (!mine.empty())
        std::copy_n(run.grads + (mine.begin - run.begin), mine.size(),
                    piece.data() + (mine.begin - part.begin));
    }
    embd.all_reduce(piece.data(), size_t(part.size()), DType::f32);
    for (const ZeroEngine::GradRun& run : runs) {
      const Range mine = intersect({run.begin, run.end}, part);
      if (!mine.empty())
        std::copy_n(piece.data() + (mine.begin - part.begin), mine.size(),
                    run.grads + (mine.begin - run.begin));
    }
  }
}

double engines_grad_norm(const std::vector<ZeroEngine*>& engines, const std::vector<std::vector<Range>>& skip,
                         const std::vector<Communicator*>& across) {
  double total = 0;
  for (size_t c = 0; c < engines.size(); ++c) {
    double sq = 0;
    for (const ZeroEngine::GradRun& run : engines[c]->reduced_grad_runs()) {
      // The run minus the skipped ranges (sorted by start, disjoint): the gaps between them.
      int64_t at = run.begin;
      auto add = [&](int64_t end) {
        const Range r = intersect({at, end}, {run.begin, run.end});
        if (!r.empty()) sq += sum_of_squares(run.grads + (r.begin - run.begin), size_t(r.size()));
      };
      for (const Range& s : skip[c]) {
        if (s.empty() || s.end <= at) continue;
        add(s.begin);
        at = std::max(at, s.end);
      }
      add(run.end);
    }
    if (Communicator* dp = engines[c]->grad_norm_part().group) sum_in_rank_order(*dp, {&sq, 1});
    total += sq;
  }
  for (Communicator* group : across)
    if (group) sum_in_rank_order(*group, {&total, 1});
  return std::sqrt(total);
}

}  // namespace odyssey
