#include "odyssey/parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "odyssey/core/error.h"

namespace odyssey {

std::string to_string(const PipeAction& a) {
  return fmt::format("{}({},{})", "FBIW"[a.kind], a.stage, a.mb);
}

namespace {

using Table = std::vector<PipeAction>;

Table gpipe(const PipelineShape& s, int r) {
  Table t;
  for (int j = 0; j < s.m; ++j) t.push_back({PipeAction::forward, r, j});
  for (int j = 0; j < s.m; ++j) t.push_back({PipeAction::backward, r, j});  // increasing: exact accumulation
  return t;
}

// 1F1B: w = min(P - r - 1, m) warm-up forwards, then one forward one backward, then the remaining
// backwards.
Table one_f_one_b(const PipelineShape& s, int r) {
  const int w = std::min(s.P - r - 1, s.m);
  Table t;
  for (int j = 0; j < w; ++j) t.push_back({PipeAction::forward, r, j});
  for (int k = 0; k < s.m - w; ++k) {
    t.push_back({PipeAction::forward, r, w + k});
    t.push_back({PipeAction::backward, r, k});
  }
  for (int k = s.m - w; k < s.m; ++k) t.push_back({PipeAction::backward, r, k});
  return t;
}

// Interleaved 1F1B (Megatron's virtual pipeline): virtual step k is (micro-batch, chunk) taken in
// groups of P micro-batches, chunk by chunk; backward steps run the chunks in reverse.
Table interleaved(const PipelineShape& s, int r) {
  const int steps = s.m * s.v;
  auto forward_step = [&](int k) {
    const int group = k / (s.P * s.v), in_group = k % (s.P * s.v);
    const int chunk = in_group / s.P, mb = group * s.P + in_group % s.P;
    return PipeAction{PipeAction::forward, chunk * s.P + r, mb};
  };
  auto backward_step = [&](int k) {
    const PipeAction f = forward_step(k);
    const int chunk = s.v - 1 - s.chunk_of(f.stage);
    return PipeAction{PipeAction::backward, chunk * s.P + r, f.mb};
  };
  const int warmup = std::min((s.P - r - 1) * 2 + (s.v - 1) * s.P, steps);
  Table t;
  for (int k = 0; k < warmup; ++k) t.push_back(forward_step(k));
  for (int k = 0; k < steps - warmup; ++k) {
    t.push_back(forward_step(warmup + k));
    t.push_back(backward_step(k));
  }
  for (int k = steps - warmup; k < steps; ++k) t.push_back(backward_step(k));
  return t;
}

// ZB-H1: 1F1B's order with each B an I; after the k-th I (k >= r) the oldest pending W, the rest at
// the end. W's run oldest first, so each weight still accumulates in increasing micro-batch order.
Table zb1(const PipelineShape& s, int r) {
  Table t;
  std::deque<int> pending;  // micro-batches whose W has not run
  int k = 0;                // I's so far
  for (const PipeAction& a : one_f_one_b(s, r)) {
    if (a.kind == PipeAction::forward) {
      t.push_back(a);
      continue;
    }
    t.push_back({PipeAction::input, a.stage, a.mb});
    pending.push_back(a.mb);
    if (k++ >= r) {
      t.push_back({PipeAction::weight, a.stage, pending.front()});
      pending.pop_front();
    }
  }
  for (int mb : pending) t.push_back({PipeAction::weight, r, mb});
  return t;
}

}  // namespace

double zb1_bubble_fraction(int P, int m, double t_f, double t_i, double t_w) {
  const double idle = (P - 1) * (t_f + t_i - t_w);
  return idle / (m * (t_f + t_i + t_w) + idle);
}

std::vector<Table> build_schedule(PipelineSchedule schedule, const PipelineShape& s) {
  ODY_CHECK(s.P >= 1 && s.v >= 1 && s.m >= 1, "pipeline: P={}, v={}, m={} must be positive", s.P, s.v, s.m);
  if (schedule == PipelineSchedule::interleaved) {
    ODY_CHECK(s.v >= 2, "parallel.pp_schedule = interleaved needs parallel.pp_virtual >= 2, got {}", s.v);
    ODY_CHECK(s.m % s.P == 0,
              "parallel.pp_schedule = interleaved needs the micro-batches per step ({}) to be a multiple of "
              "parallel.pp ({})",
              s.m, s.P);
  } else {
    ODY_CHECK(s.v == 1, "parallel.pp_virtual = {} needs parallel.pp_schedule = interleaved", s.v);
  }
  std::vector<Table> tables;
  for (int r = 0; r < s.P; ++r)
    tables.push_back(schedule == PipelineSchedule::gpipe         ? gpipe(s, r)
                     : schedule == PipelineSchedule::one_f_one_b ? one_f_one_b(s, r)
                     : schedule == PipelineSchedule::zb1         ? zb1(s, r)
                                                                 : interleaved(s, r));
  return tables;
}

void check_schedule_zero_stage(PipelineSchedule schedule, int zero_stage) {
  ODY_CHECK(schedule != PipelineSchedule::zb1 || zero_stage <= 1,
            "parallel.pp_schedule = zb1 needs parallel.zero_stage 0 or 1, got {} (ZeRO 2-3 reduce each "
            "micro-batch's gradients when its backward ends; zb1 defers the weight gradients)",
            zero_stage);
  // GPipe's last stage runs every micro-batch's loss (the head's weight gradient and the final norm's) in
  // its forward phase, before any backward; ZeRO 2-3 reduce and free a unit's gradients as each
  // micro-batch's backward ends, so the later losses' gradients would land in freed buckets.
  ODY_CHECK(schedule != PipelineSchedule::gpipe || zero_stage <= 1,
            "parallel.pp_schedule = gpipe needs parallel.zero_stage 0 or 1, got {} (GPipe computes every "
            "micro-batch's loss before the first backward; ZeRO 2-3 reduce each micro-batch's gradients "
            "when its backward ends): use 1f1b or interleaved with ZeRO 2-3",
            zero_stage);
}

ScheduleSimulation validate_schedule(const std::vector<Table>& tables, const PipelineShape& s, double t_f,
                                     double t_b, double t_w) {
  const int S = s.stages();
  ODY_CHECK(int(tables.size()) == s.P, "pipeline schedule: {} tables for {} ranks", tables.size(), s.P);
  // Each action exactly once, on its stage's rank.
  std::set<std::tuple<int, int, int>> seen;
  for (int r = 0; r < s.P; ++r)
    for (const PipeAction& a : tables[size_t(r)]) {
      ODY_CHECK(a.stage >= 0 && a.stage < S && a.mb >= 0 && a.mb < s.m,
                "pipeline schedule: {} out of range on rank {}", to_string(a), r);
      ODY_CHECK(s.rank_of(a.stage) == r, "pipeline schedule: {} is on rank {}, its stage lives on rank {}",
                to_string(a), r, s.rank_of(a.stage));
      ODY_CHECK(seen.insert({int(a.kind), a.stage, a.mb}).second, "pipeline schedule: {} appears twice",
                to_string(a));
    }
  // Either a B for every (stage, micro-batch) or an I and a W (split backward).
  const bool split = seen.count({int(PipeAction::input), 0, 0}) > 0;
  ODY_CHECK(int(seen.size()) == (split ? 3 : 2) * S * s.m, "pipeline schedule: {} actions, expected {}",
            seen.size(), (split ? 3 : 2) * S * s.m);
  for (const auto& [kind, stage, mb] : seen)
    ODY_CHECK(kind == PipeAction::forward || (kind == PipeAction::backward) != split,
              "pipeline schedule: {} mixes B with I/W", to_string({PipeAction::Kind(kind), stage, mb}));
  // Per stage, the backward actions of each kind in increasing micro-batch order: every parameter
  // accumulates its gradient in the single process's order.
  for (int r = 0; r < s.P; ++r) {
    std::map<std::pair<int, int>, int> last;  // (kind, stage) -> micro-batch
    for (const PipeAction& a : tables[size_t(r)]) {
      if (a.kind == PipeAction::forward) continue;
      auto [it, first] = last.insert({{int(a.kind), a.stage}, a.mb});
      ODY_CHECK(
          first || it->second < a.mb,
          "pipeline schedule: {} on rank {} runs after micro-batch {}'s: gradients would accumulate out "
          "of micro-batch order",
          to_string(a), r, it->second);
      it->second = a.mb;
    }
  }

  // Messages between two ranks must be received in the order they are sent (one tag per direction):
  // forward activations (stage s -> s+1) and backward gradients (stage s -> s-1) separately.
  // (An I communicates as a B does; a W not at all.)
  for (int kind = 0; kind < 2; ++kind) {
    std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> sent,
        received;  // (from, to) -> (stage, mb)
    for (int r = 0; r < s.P; ++r)
      for (const PipeAction& a : tables[size_t(r)]) {
        const int as = a.kind == PipeAction::input ? PipeAction::backward : a.kind;
        if (as != kind) continue;
        const bool forward = a.kind == PipeAction::forward;
        const int next = forward ? a.stage + 1 : a.stage - 1, prev = forward ? a.stage - 1 : a.stage + 1;
        if (next >= 0 && next < S) sent[{r, s.rank_of(next)}].push_back({a.stage, a.mb});
        if (prev >= 0 && prev < S) received[{s.rank_of(prev), r}].push_back({prev, a.mb});
      }
    ODY_CHECK(sent == received, "pipeline schedule: {} messages are received in another order than sent",
              kind == PipeAction::forward ? "activation" : "gradient");
  }

  // Unit-time simulation: a rank runs its next action as soon as its input has arrived. (An I finishes
  // what a B does for the stage before; a W needs its I.)
  const int grad = split ? PipeAction::input : PipeAction::backward;
  ScheduleSimulation sim;
  sim.peak_in_flight.assign(size_t(s.P), 0);
  std::map<std::tuple<int, int, int>, double> done;  // (kind, stage, mb) -> finish time
  std::vector<size_t> next(size_t(s.P), 0);
  std::vector<double> clock(size_t(s.P), 0), busy(size_t(s.P), 0);
  std::vector<int> in_flight(size_t(s.P), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.P; ++r) {
      while (next[size_t(r)] < tables[size_t(r)].size()) {
        const PipeAction& a = tables[size_t(r)][next[size_t(r)]];
        const bool forward = a.kind == PipeAction::forward;
        double ready = clock[size_t(r)];
        // Inputs: the previous stage's forward, or the next stage's backward (the loss for the last).
        std::vector<std::tuple<int, int, int>> needs;
        if (forward && a.stage > 0) needs.push_back({PipeAction::forward, a.stage - 1, a.mb});
        if (a.kind == PipeAction::weight) {
          needs.push_back({PipeAction::input, a.stage, a.mb});
        } else if (!forward) {
          needs.push_back({PipeAction::forward, a.stage, a.mb});
          if (a.stage + 1 < S) needs.push_back({grad, a.stage + 1, a.mb});
        }
        bool blocked = false;
        for (const auto& n : needs) {
          auto it = done.find(n);
          if (it == done.end()) {
            blocked = true;
            break;
          }
          ready = std::max(ready, it->second);
        }
        if (blocked) break;
        const double t = forward                          ? t_f
                         : a.kind == PipeAction::backward ? t_b
                         : a.kind == PipeAction::input    ? t_b - t_w
                                                          : t_w;
        clock[size_t(r)] = ready + t;
        busy[size_t(r)] += t;
        done[{int(a.kind), a.stage, a.mb}] = clock[size_t(r)];
        // Held from F until B, or W (which still needs the GEMM operands).
        in_flight[size_t(r)] += forward ? 1 : a.kind == PipeAction::input ? 0 : -1;
        sim.peak_in_flight[size_t(r)] = std::max(sim.peak_in_flight[size_t(r)], in_flight[size_t(r)]);
        ++next[size_t(r)];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < s.P; ++r)
    if (next[size_t(r)] < tables[size_t(r)].size())
      stuck += fmt::format(" rank {} at {};", r, to_string(tables[size_t(r)][next[size_t(r)]]));
  ODY_CHECK(stuck.empty(), "pipeline schedule deadlocks (P={}, v={}, m={}):{}", s.P, s.v, s.m, stuck);
  sim.step_time = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (int r = 0; r < s.P; ++r) idle += sim.step_time - busy[size_t(r)];
  sim.bubble_fraction = idle / (s.P * sim.step_time);
  return sim;
}

std::vector<std::pair<int, int>> split_layers(int n_layer, int stages) {
  ODY_CHECK(
      stages >= 1 && n_layer >= stages,
      "pipeline: model.n_layer ({}) must be at least the number of stages ({}: parallel.pp x pp_virtual)",
      n_layer, stages);
  // n_layer + 2 layer equivalents (embeddings, head) cut as evenly as possible; stage i ends at the
  // cut nearest to (i + 1) (n_layer + 2) / S, minus the embeddings' one.
  std::vector<std::pair<int, int>> ranges;
  const int total = n_layer + 2;
  int begin = 0;
  for (int i = 0; i < stages; ++i) {
    int end = (i + 1 == stages) ? n_layer : int((int64_t(i + 1) * total + stages / 2) / stages) - 1;
    end = std::clamp(end, begin + 1, n_layer - (stages - i - 1));  // at least one layer each
    ranges.push_back({begin, end});
    begin = end;
  }
  return ranges;
}

std::vector<std::pair<int, int>> stage_layers(int n_layer, int stages, const std::vector<int>& layers) {
  if (layers.empty()) return split_layers(n_layer, stages);
  ODY_CHECK(
      int(layers.size()) == stages,
      "parallel.pp_layers has {} entries, expected one per stage: parallel.pp x parallel.pp_virtual = {}",
      layers.size(), stages);
  std::vector<std::pair<int, int>> ranges;
  int64_t begin = 0;  // a sum of entries: 64 bits, and checked against n_layer entry by entry
  for (int n : layers) {
    ODY_CHECK(n >= 1, "parallel.pp_layers: every stage needs at least one layer, got {}", n);
    ODY_CHECK(begin + n <= n_layer, "parallel.pp_layers places more than the {} layers of model.n_layer",
              n_layer);
    ranges.push_back({int(begin), int(begin + n)});
    begin += n;
  }
  ODY_CHECK(begin == n_layer, "parallel.pp_layers places {} layers, model.n_layer is {}", begin, n_layer);
  return ranges;
}

std::string describe_stage_layers(const std::vector<std::pair<int, int>>& ranges) {
  std::string s;
  for (auto [b, e] : ranges) s += fmt::format("{}[{}, {})", s.empty() ? "" : " ", b, e);
  return s;
}

}  // namespace odyssey
