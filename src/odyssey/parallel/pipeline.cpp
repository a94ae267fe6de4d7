#include "odyssey/parallel/pipeline.h"

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
  validate_schedule(tables, shape);
  actions_ = tables[size_t(pp.rank())];
}

PipelineRunner::InFlight& PipelineRunner::slot(int chunk, int mb) {
  auto& s = in_flight_[{chunk, mb}];
  if (!s) {
    auto& pool = free_[size_t(chunk)];
    if (pool.empty()) {
      s = std::make_unique<InFlight>();
      s->acts = chunks_[size_t(chunk)]->make_activations();
    } else {
      s = std::move(pool.back());
      pool.pop_back();
      if (s->send) s->send->wait();  // its last message must be out before its buffers are reused
      s->send.reset();
    }
  }
  return *s;
}

void PipelineRunner::release(int chunk, int mb) {
  auto it = in_flight_.find({chunk, mb});
  free_[size_t(chunk)].push_back(std::move(it->second));
  in_flight_.erase(it);
}

double PipelineRunner::run(const std::function<PipelineMicroBatch(int)>& micro_batch, float dloss,
                           int64_t* count) {
  const int S = shape_.stages(), P = shape_.P;
  double loss = 0;
  int64_t counted = 0;
  wait_s_ = 0;
  for (const PipeAction& a : actions_) {
    const int chunk = shape_.chunk_of(a.stage);
    Stage& stage = *chunks_[size_t(chunk)];
    const PipelineMicroBatch mb = micro_batch(a.mb);
    const size_t hidden = size_t(mb.B) * mb.T * stage.config().d_model;
    InFlight& f = slot(chunk, a.mb);
    if (a.kind == PipeAction::forward) {
      if (a.stage > 0) {  // the previous stage's output
        f.input.resize(hidden);
        Timer wait;
        pp_.recv(f.input.data(), hidden, DType::f32, (a.stage - 1) % P, p2p_tag::pp_activation);
        wait_s_ += wait.seconds();
        f.acts->input = f.input.data();
      }
      stage.forward(*f.acts, mb.inputs, mb.targets, mb.positions, mb.B, mb.T);
      if (a.stage + 1 < S) {
        f.send =
            pp_.send_async(f.acts->output(), hidden, DType::f32, (a.stage + 1) % P, p2p_tag::pp_activation);
      } else {
        int64_t n = 0;
        loss += stage.loss(*f.acts, dloss, &n);
        counted += n;
      }
      continue;
    }
    if (a.stage + 1 < S) {  // d(output) from the next stage
      if (f.send) f.send->wait();
      f.out_grad.resize(hidden);
      Timer wait;
      pp_.recv(f.out_grad.data(), hidden, DType::f32, (a.stage + 1) % P, p2p_tag::pp_gradient);
      wait_s_ += wait.seconds();
      f.acts->output_grad = f.out_grad.data();
    }
    stage.backward(*f.acts);
    if (a.stage > 0)
      f.send =
          pp_.send_async(f.acts->input_grad(), hidden, DType::f32, (a.stage - 1) % P, p2p_tag::pp_gradient);
    release(chunk, a.mb);
  }
  // Every message of the step is out before the caller touches parameters or activations.
  for (auto& pool : free_)
    for (auto& s : pool)
      if (s->send) {
        s->send->wait();
        s->send.reset();
      }
  if (count) *count = counted;
  return loss;
}

}  // namespace odyssey
