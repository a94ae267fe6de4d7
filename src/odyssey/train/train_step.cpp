#include "odyssey/train/train_step.h"

#include <cmath>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/reductions.h"

namespace odyssey {

StepResult train_step(Stage& model, StageActivations& acts, ZeroEngine& engine, MicroBatches& data,
                      Communicator& loss_group, const StepSettings& settings, int64_t step, float lr,
                      OpObserver* observer) {
  const int B = data.rows(), T = data.local_len();
  std::vector<int> inputs(size_t(B) * size_t(T)), targets(size_t(B) * size_t(T));
  observed(observer, "memset.zero_grads", 0, [&] { engine.zero_grad(); });
  LossSum local;
  for (int micro = 0; micro < settings.micro_steps; ++micro) {
    data.load(step, micro, inputs.data(), targets.data());
    engine.begin_micro_step(micro == settings.micro_steps - 1);
    int64_t n = 0;
    model.forward(acts, inputs.data(), targets.data(), data.positions(), B, T);
    local.sum += model.loss(acts, settings.dloss, &n);
    model.backward(acts);
    local.count += n;
    engine.end_micro_step();
  }
  StepResult r;
  r.loss = global_mean_loss(loss_group, local);
  observed(observer, "optim.grad_norm", 0,
           [&] { r.grad_norm = global_grad_norm({engine.grad_norm_part()}); });
  ODY_CHECK(std::isfinite(r.loss) && std::isfinite(r.grad_norm),
            "step {}: loss {} / gradient norm {} is not finite", step + 1, r.loss, r.grad_norm);
  const float scale = clip_scale(r.grad_norm, settings.grad_clip);
  observed(observer, "optim.update", 0, [&] { engine.step(lr, step + 1, scale); });
  return r;
}

}  // namespace odyssey
