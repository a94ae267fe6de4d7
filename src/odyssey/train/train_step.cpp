#include "odyssey/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/pipeline_grads.h"
#include "odyssey/parallel/reductions.h"

namespace odyssey {

namespace {

// The end of every step: a loss or norm that is not finite fails before any parameter changes; then
// the clip factor and each engine's update.
void update(const StepResult& r, const std::vector<ZeroEngine*>& engines, const StepSettings& settings,
            int64_t step, float lr, OpObserver* observer) {
  ODY_CHECK(std::isfinite(r.loss) && std::isfinite(r.grad_norm),
            "step {}: loss {} / gradient norm {} is not finite", step + 1, r.loss, r.grad_norm);
  const float scale = clip_scale(r.grad_norm, settings.grad_clip);
  observed(observer, "optim.update", 0, [&] {
    for (ZeroEngine* engine : engines) engine->step(lr, step + 1, scale);
  });
}

}  // namespace

StepResult train_step(PipelineStep& pipe, MicroBatches& data, Communicator& loss_group,
                      const StepSettings& settings, int64_t step, float lr, OpObserver* observer) {
  const int B = data.rows(), T = data.local_len(), m = settings.micro_steps;
  // Every stage sees the step's micro-batches (the first reads the tokens, the last the targets).
  std::vector<std::vector<int>> inputs(static_cast<size_t>(m)), targets(static_cast<size_t>(m));
  for (int micro = 0; micro < m; ++micro) {
    inputs[size_t(micro)].resize(size_t(B) * size_t(T));
    targets[size_t(micro)].resize(size_t(B) * size_t(T));
    data.load(step, micro, inputs[size_t(micro)].data(), targets[size_t(micro)].data());
  }
  observed(observer, "memset.zero_grads", 0, [&] {
    for (ZeroEngine* engine : pipe.engines) engine->zero_grad();
  });
  LossSum local;
  local.sum = pipe.runner->run(
      [&](int j) {
        return PipelineMicroBatch{inputs[size_t(j)].data(), targets[size_t(j)].data(), data.positions(), B,
                                  T};
      },
      settings.dloss, &local.count);
  for (size_t c = 0; c < pipe.engines.size(); ++c)
    if (!pipe.tied[c].empty() && pipe.embd)
      sum_tied_gradient(*pipe.engines[c], pipe.tied[c], *pipe.embd, pipe.scratch);
  // Per chunk: the tied copy and, under tensor parallelism, the replicated tensors on all tp ranks but one.
  std::vector<std::vector<Range>> skip(pipe.engines.size());
  for (size_t c = 0; c < pipe.engines.size(); ++c) {
    if (!pipe.tp.empty()) {
      pipe.tp[c].sum(*pipe.engines[c]);
      skip[c] = pipe.tp[c].norm_skip;
    }
    skip[c].push_back(pipe.norm_skip[c]);
    std::sort(skip[c].begin(), skip[c].end(), [](Range a, Range b) { return a.begin < b.begin; });
  }
  StepResult r;
  r.loss = global_mean_loss(loss_group, local, pipe.pp);
  // The norm over every stage, run by run minus what is skipped; one stage without tensor parallelism
  // skips nothing and sums its engine's part whole (the two groupings round differently: each layout
  // keeps the numbers it always had).
  Communicator* tp = pipe.tp.empty() ? nullptr : pipe.tp[0].tp;
  observed(observer, "optim.grad_norm", 0, [&] {
    r.grad_norm = pipe.pp || tp ? engines_grad_norm(pipe.engines, skip, {pipe.pp, tp})
                                : global_grad_norm({pipe.engines.front()->grad_norm_part()});
  });
  r.pp_wait_ms = pipe.runner->wait_seconds() * 1e3;
  r.pp_compute_ms = pipe.runner->compute_seconds() * 1e3;
  r.pp_run_ms = pipe.runner->run_seconds() * 1e3;
  update(r, pipe.engines, settings, step, lr, observer);
  return r;
}

OneStagePipeline::OneStagePipeline(Stage& stage, ZeroEngine& engine, int micro_steps)
    : runner(std::make_unique<PipelineRunner>(
          pp, std::vector<Stage*>{&stage}, PipelineShape{1, 1, micro_steps}, PipelineSchedule::one_f_one_b)) {
  step.runner = runner.get();
  step.engines = {&engine};
  runner->set_engines(step.engines);
  step.tied = {Range{}};
  step.norm_skip = {Range{}};
}

}  // namespace odyssey
