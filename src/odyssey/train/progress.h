// The step log's progress: time elapsed since the loop began and an estimate of the time left
// (mean time per step so far x steps left, validations and saves included), shown once the run's
// estimated length exceeds a minute, so short runs keep their lines short.
#pragma once

#include <cstdint>
#include <string>

#include "odyssey/core/timer.h"

namespace odyssey {

// "42s", "3m07s", "2h05m".
std::string format_duration(double seconds);

class Progress {
 public:
  // The loop runs steps [first_step, end_step).
  Progress(int64_t first_step, int64_t end_step, double show_after_s = 60)
      : first_(first_step), end_(end_step), show_after_s_(show_after_s) {}

  // " | elapsed 1m05s, ETA 3m10s" after the step numbered `done` (1-based) ends, or "" while the run
  // looks shorter than show_after_s.
  std::string line(int64_t done) const { return line_at(done, timer_.seconds()); }
  std::string line_at(int64_t done, double elapsed_s) const;

 private:
  int64_t first_, end_;
  double show_after_s_;
  Timer timer_;
};

}  // namespace odyssey
