#include "odyssey/parallel/pipeline.h"

#include <algorithm>

#include "odyssey/comm/p2p_tags.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"

namespace odyssey {

PipelineRunner::PipelineRunner(Communicator& pp, std::vector<Stage*> chunks, const PipelineShape& shape,
                               PipelineSchedule schedule)
    : pp_(pp), chunks_(std::move(chunks)), shape_(shape), free_(chunks_.size()) {
  ODY_CHECK(pp.size() == shape.P, "pipeline: the pp group has {} ranks, the shape {}", pp.size(), shape.P);
  ODY_CHECK(int(chunks_.size()) == shape.v,
            "pipeline: {} stages on this rank, expected parallel.pp_virtual = {}", chunks_.size(), shape.v);
  const auto tables = build_schedule(schedule, shape);
  actions_ = tables[size_t(pp.rank())];
  schedule_ = schedule;
  unit_cost_bubble_ = validate_schedule(tables, shape, 1, 2, 1).bubble_fraction;
}

void PipelineRunner::set_engines(std::vector<ZeroEngine*> engines) {
  ODY_CHECK(engines.empty() || engines.size() == chunks_.size(), "pipeline: {} engines for {} stages",
            engines.size(), chunks_.size());
  for (ZeroEngine* e : engines) check_schedule_zero_stage(schedule_, e->stage());
  engines_ = std::move(engines);
}

PipelineRunner::InFlight& PipelineRunner::slot(int chunk, int mb) {
  auto& s = in_flight_[{chunk, mb}];
  if (!s) {
    // A free slot whose last message is out. Never wait for one: the receiver may itself be waiting
    // for this rank (a message above the eager limit completes only once it is received).
    auto& pool = free_[size_t(chunk)];
    for (auto it = pool.begin(); it != pool.end(); ++it)
      if (!(*it)->send || (*it)->send->test()) {
        s = std::move(*it);
        pool.erase(it);
        s->send.reset();
        break;
      }
    if (!s) {
      s = std::make_unique<InFlight>();
      s->acts = chunks_[size_t(chunk)]->make_activations();
    }
  }
  return *s;
}

void PipelineRunner::release(int chunk, int mb) {
  auto it = in_flight_.find({chunk, mb});
  // d(output) was copied into the stage's activations by its backward: a free slot holds none, so what
  // a micro-batch holds does not depend on which slot it reuses (the footprint, train/footprint.h).
  it->second->out_grad.resize(0);
  free_[size_t(chunk)].push_back(std::move(it->second));
  in_flight_.erase(it);
}

OffloadStats PipelineRunner::offload() const {
  OffloadStats total;
  auto add = [&](const InFlight& s) {
    const OffloadStats o = s.acts->offload();
    total.bytes_written += o.bytes_written, total.bytes_read += o.bytes_read;
    total.stall_seconds += o.stall_seconds, total.bytes_read_late += o.bytes_read_late;
  };
  for (const auto& pool : free_)
    for (const auto& s : pool) add(*s);
  for (const auto& [key, s] : in_flight_) add(*s);
  return total;
}

void PipelineRunner::add_compute(PipeAction::Kind kind, double seconds) {
  compute_s_ += seconds;
  compute_by_kind_[size_t(kind)] += seconds;
}

void PipelineRunner::track_in_flight() {
  size_t bytes = 0;
  for (const auto& [key, s] : in_flight_) bytes += s->acts->bytes() + s->input.bytes() + s->out_grad.bytes();
  int held = int(in_flight_.size());  // micro-batch stages: with activations, or only W's operands
  for (const auto& [key, d] : deferred_) {
    bytes += d->bytes();
    held += in_flight_.count(key) ? 0 : 1;
  }
  peak_in_flight_ = std::max(peak_in_flight_, held);
  peak_bytes_ = std::max(peak_bytes_, bytes);
}

// F(stage, mb): the previous stage's output (or the tokens), the stage, then its output on to the
// next stage's rank, or (the last stage) the loss.
void PipelineRunner::forward(int stage_index, const PipelineMicroBatch& mb, float dloss, double* loss,
                             int64_t* counted) {
  const int S = shape_.stages(), P = shape_.P, chunk = shape_.chunk_of(stage_index);
  Stage& stage = *chunks_[size_t(chunk)];
  const size_t hidden = size_t(stage.residual_rows(int64_t(mb.B) * mb.T)) * stage.config().d_model;
  InFlight& f = slot(chunk, mb.index);
  if (stage_index > 0) {
    f.input.resize(hidden);
    Timer wait;
    pp_.recv(f.input.data(), hidden, DType::f32, (stage_index - 1) % P, p2p_tag::pp_activation);
    wait_s_ += wait.seconds();
    f.acts->input = f.input.data();
  }
  // The forward and its loss are the engine's traffic of the micro-batch as its backward is (ZeRO-3's
  // unit gathers), though they run outside its micro-step.
  ZeroEngine* engine = engines_.empty() ? nullptr : engines_[size_t(chunk)];
  Timer compute;
  if (engine) engine->begin_forward();
  stage.forward(*f.acts, mb.inputs, mb.targets, mb.positions, mb.B, mb.T);
  if (stage_index + 1 == S) {
    int64_t n = 0;
    *loss += stage.loss(*f.acts, dloss, &n);
    *counted += n;
  }
  if (engine) engine->end_forward();
  add_compute(PipeAction::forward, compute.seconds());
  if (stage_index + 1 < S)
    f.send =
        pp_.send_async(f.acts->output(), hidden, DType::f32, (stage_index + 1) % P, p2p_tag::pp_activation);
  track_in_flight();
}

void PipelineRunner::backward(int stage_index, const PipelineMicroBatch& mb, DeferredWeightGrads* later,
                              bool last) {
  const int S = shape_.stages(), P = shape_.P, chunk = shape_.chunk_of(stage_index);
  Stage& stage = *chunks_[size_t(chunk)];
  const size_t hidden = size_t(stage.residual_rows(int64_t(mb.B) * mb.T)) * stage.config().d_model;
  InFlight& f = slot(chunk, mb.index);
  if (stage_index + 1 < S) {  // d(output) from the next stage
    f.out_grad.resize(hidden);
    Timer wait;
    pp_.recv(f.out_grad.data(), hidden, DType::f32, (stage_index + 1) % P, p2p_tag::pp_gradient);
    wait_s_ += wait.seconds();
    f.acts->output_grad = f.out_grad.data();
    // The next stage has received this output (its gradient came back), so the send is done; it
    // must be before the backward reuses the output's storage.
    if (f.send) f.send->wait();
    f.send.reset();
  }
  // One micro-step of the chunk's engine; its last backward reduces the step's gradients (an I is
  // never the last: its W is).
  ZeroEngine* engine = engines_.empty() ? nullptr : engines_[size_t(chunk)];
  Timer compute;
  if (engine) engine->begin_micro_step(last);
  stage.set_deferred_weight_grads(later);
  stage.backward(*f.acts);
  stage.set_deferred_weight_grads(nullptr);
  if (engine) engine->end_micro_step();
  add_compute(later ? PipeAction::input : PipeAction::backward, compute.seconds());
  if (stage_index > 0)
    f.send =
        pp_.send_async(f.acts->input_grad(), hidden, DType::f32, (stage_index - 1) % P, p2p_tag::pp_gradient);
  if (later) track_in_flight();  // the activations and the recorded operands, at once
  release(chunk, mb.index);
}

void PipelineRunner::weight(int stage_index, int mb, bool last) {
  const int chunk = shape_.chunk_of(stage_index);
  auto it = deferred_.find({chunk, mb});
  ODY_CHECK(it != deferred_.end(), "pipeline: W({},{}) before its I", stage_index, mb);
  ZeroEngine* engine = engines_.empty() ? nullptr : engines_[size_t(chunk)];
  Timer compute;
  it->second->run();
  if (engine && last) {
    // The step's gradients are complete now: the engine's last micro-step, every unit's backward use
    // ended (ZeRO 0-1 launch their bucket reductions here).
    engine->begin_micro_step(true);
    for (const UnitUse& use : chunks_[size_t(chunk)]->unit_schedule())
      if (!use.forward) engine->after_backward(use.unit);
    engine->end_micro_step();
  }
  add_compute(PipeAction::weight, compute.seconds());
  free_deferred_.push_back(std::move(it->second));
  deferred_.erase(it);
}

void PipelineRunner::wait_sends() {
  for (auto& pool : free_)
    for (auto& s : pool)
      if (s->send) {
        s->send->wait();
        s->send.reset();
      }
}

double PipelineRunner::run(const std::function<PipelineMicroBatch(int)>& micro_batch, float dloss,
                           int64_t* count) {
  Timer whole;
  double loss = 0;
  int64_t counted = 0;
  wait_s_ = compute_s_ = 0;
  compute_by_kind_ = {};
  peak_in_flight_ = 0;
  peak_bytes_ = 0;
  std::vector<int> backwards_left(chunks_.size(), shape_.m);
  for (const PipeAction& a : actions_) {
    PipelineMicroBatch mb = micro_batch(a.mb);
    mb.index = a.mb;
    if (a.kind == PipeAction::forward) {
      forward(a.stage, mb, dloss, &loss, &counted);
      continue;
    }
    const int chunk = shape_.chunk_of(a.stage);
    if (a.kind == PipeAction::weight) {
      weight(a.stage, a.mb, --backwards_left[size_t(chunk)] == 0);
      continue;
    }
    DeferredWeightGrads* later = nullptr;
    if (a.kind == PipeAction::input) {
      Deferred& d = deferred_[{chunk, a.mb}];
      if (free_deferred_.empty()) free_deferred_.push_back(std::make_unique<DeferredWeightGrads>());
      d = std::move(free_deferred_.back());
      free_deferred_.pop_back();
      later = d.get();
    }
    backward(a.stage, mb, later, !later && --backwards_left[size_t(chunk)] == 0);
  }
  // Every message of the step is out before the caller touches parameters or activations.
  wait_sends();
  run_s_ = whole.seconds();
  if (count) *count = counted;
  return loss;
}

double PipelineRunner::run_forward(const std::function<PipelineMicroBatch(int)>& micro_batch, int m,
                                   int64_t* count) {
  double loss = 0;
  int64_t counted = 0;
  wait_s_ = compute_s_ = 0;
  compute_by_kind_ = {};
  for (int j = 0; j < m; ++j)
    for (int chunk = 0; chunk < shape_.v; ++chunk) {
      PipelineMicroBatch mb = micro_batch(j);
      mb.index = j;
      forward(chunk * shape_.P + pp_.rank(), mb, 0.0f, &loss, &counted);
      release(chunk, j);
    }
  wait_sends();
  if (count) *count = counted;
  return loss;
}

}  // namespace odyssey
