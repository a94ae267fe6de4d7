#include "odyssey/parallel/pipeline_grads.h"

#include <algorithm>
#include <cmath>

#include "odyssey/core/buffer.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/reductions.h"

namespace odyssey {

void sum_tied_gradient(ZeroEngine& engine, Range tensor, Communicator& embd) {
  const std::vector<ZeroEngine::GradRun> runs = engine.reduced_grad_runs();
  // In pieces of at most 4M elements, so a large vocabulary needs no second full-size buffer.
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

double pipeline_grad_norm(const std::vector<ZeroEngine*>& engines, const std::vector<Range>& skip,
                          Communicator& pp) {
  double total = 0;
  for (size_t c = 0; c < engines.size(); ++c) {
    double sq = 0;
    for (const ZeroEngine::GradRun& run : engines[c]->reduced_grad_runs()) {
      // The run minus the skipped range: what lies before it and what lies after it.
      const Range before =
          intersect({run.begin, run.end}, {run.begin, skip[c].empty() ? run.end : skip[c].begin});
      const Range after = skip[c].empty() ? Range{} : intersect({run.begin, run.end}, {skip[c].end, run.end});
      for (Range r : {before, after})
        if (!r.empty()) sq += sum_of_squares(run.grads + (r.begin - run.begin), size_t(r.size()));
    }
    if (Communicator* dp = engines[c]->grad_norm_part().group) sum_in_rank_order(*dp, {&sq, 1});
    total += sq;
  }
  sum_in_rank_order(pp, {&total, 1});
  return std::sqrt(total);
}

}  // namespace odyssey
