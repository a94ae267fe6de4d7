#include "odyssey/optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace odyssey {

float LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * float(step + 1) / float(warmup_steps);
  if (kind == ScheduleKind::constant) return lr;
  int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));
  return float(min_lr + coeff * (lr - min_lr));
}

}  // namespace odyssey
