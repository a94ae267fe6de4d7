// Learning-rate schedules: linear warmup, then cosine decay to min_lr (or constant).
#pragma once

#include <cstdint>
#include <string>

namespace odyssey {

struct LrSchedule {
  std::string kind = "cosine";  // "cosine" or "constant"
  float lr = 6e-4f;
  float min_lr = 0.0f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // LR for optimizer step `step` (0-based): warmup lr*(step+1)/warmup, then cosine from lr to min_lr
  // over the remaining steps.
  float at(int64_t step) const;
};

}  // namespace odyssey
