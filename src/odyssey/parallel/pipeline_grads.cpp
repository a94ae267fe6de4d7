#include "odyssey/parallel/pipeline_grads.h"

#include <algorithm>
#include <cmath>

#include "odyssey/core/buffer.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/reductions.h"

namespace odyssey {

std::vector<Range> reduced_grad_ranges(const Partition& part, int stage) {
  std::vector<Range> runs;
  for (const Partition::Segment& seg : part.segments()) {
    if (stage == 0) {
      runs.push_back(seg.dense);
      continue;
    }
    const Range valid = seg.layout.valid_range(part.rank());
    if (!valid.empty()) runs.push_back({seg.dense.begin + valid.begin, seg.dense.begin + valid.end});
  }
  return runs;
}

std::vector<uint64_t> gradient_sum_messages(std::vector<Range> runs, const std::vector<Range>& tensors,
                                            HeldRuns held) {
  constexpr int64_t kPiece = int64_t(1) << 22;
  std::sort(runs.begin(), runs.end(), [](Range a, Range b) { return a.begin < b.begin; });
  std::vector<int64_t> segments;
  auto add = [&](int64_t n) {
    for (int64_t at = 0; at < n; at += kPiece) segments.push_back(std::min(kPiece, n - at));
  };
  for (const Range& tensor : tensors) {
    int64_t at = tensor.begin;
    for (const Range& run : runs) {
      const Range mine = intersect(run, tensor);
      if (mine.empty()) continue;
      if (held == HeldRuns::differ && mine.begin > at) add(mine.begin - at);
      add(mine.size());
      at = mine.end;
    }
    if (held == HeldRuns::differ && at < tensor.end) add(tensor.end - at);
  }
  std::vector<uint64_t> messages;
  for (size_t i = 0; i < segments.size();) {
    int64_t n = 0;
    while (i < segments.size() && n + segments[i] <= kPiece) n += segments[i++];
    messages.push_back(uint64_t(n));
  }
  return messages;
}

void sum_gradient_ranges(ZeroEngine& engine, const std::vector<Range>& tensors, Communicator& group,
                         HeldRuns held, FloatBuffer& scratch) {
  constexpr int64_t kPiece = int64_t(1) << 22;
  // The elements that travel, in table order, as segments of at most kPiece: this rank's gradients,
  // or null where it holds none (HeldRuns::differ only).
  struct Segment {
    float* grads;
    int64_t n;
  };
  std::vector<Segment> segments;
  auto add = [&](float* grads, int64_t n) {
    for (int64_t at = 0; at < n; at += kPiece)
      segments.push_back({grads ? grads + at : nullptr, std::min(kPiece, n - at)});
  };
  std::vector<ZeroEngine::GradRun> runs = engine.reduced_grad_runs();
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (const Range& tensor : tensors) {
    int64_t at = tensor.begin;  // the runs are disjoint
    for (const ZeroEngine::GradRun& run : runs) {
      const Range mine = intersect({run.begin, run.end}, tensor);
      if (mine.empty()) continue;
      if (held == HeldRuns::differ && mine.begin > at) add(nullptr, mine.begin - at);
      add(run.grads + (mine.begin - run.begin), mine.size());
      at = mine.end;
    }
    if (held == HeldRuns::differ && at < tensor.end) add(nullptr, tensor.end - at);
  }
  for (size_t i = 0; i < segments.size();) {
    // Segments [i, j) packed into one message of n elements.
    size_t j = i;
    int64_t n = 0;
    while (j < segments.size() && n + segments[j].n <= kPiece) n += segments[j++].n;
    float* buf = scratch.at_least(size_t(n));
    int64_t at = 0;
    for (size_t k = i; k < j; at += segments[k++].n)
      if (segments[k].grads)
        std::copy_n(segments[k].grads, segments[k].n, buf + at);
      else
        std::fill_n(buf + at, segments[k].n, 0.0f);
    group.all_reduce(buf, size_t(n), DType::f32);
    at = 0;
    for (size_t k = i; k < j; at += segments[k++].n)
      if (segments[k].grads) std::copy_n(buf + at, segments[k].n, segments[k].grads);
    i = j;
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
