// Learning-rate schedules: linear warmup, then cosine decay to min_lr (or constant).
#pragma once

#include <cstdint>

#include "odyssey/core/enum_names.h"

namespace odyssey {

enum class ScheduleKind { cosine, constant };
inline constexpr EnumNames<ScheduleKind, 2> kScheduleNames = {
    {{"cosine", ScheduleKind::cosine}, {"constant", ScheduleKind::constant}}};

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::cosine;
  float lr = 6e-4f;
  float min_lr = 0.0f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // LR for optimizer step `step` (0-based): warmup lr*(step+1)/warmup, then cosine from lr to min_lr
  // over the remaining steps.
  float at(int64_t step) const;
};

}  // namespace odyssey
