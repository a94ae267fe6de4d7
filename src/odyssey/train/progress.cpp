#include "odyssey/train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace odyssey {

std::string format_duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

std::string Progress::line_at(int64_t done, double elapsed_s) const {
  const int64_t steps_done = done - first_, steps_left = end_ - done;
  if (steps_done <= 0) return "";
  const double eta = elapsed_s / double(steps_done) * double(std::max<int64_t>(steps_left, 0));
  if (elapsed_s + eta <= show_after_s_) return "";
  return fmt::format(" | elapsed {}, ETA {}", format_duration(elapsed_s), format_duration(eta));
}

}  // namespace odyssey
