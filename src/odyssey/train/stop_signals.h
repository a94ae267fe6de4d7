// SIGTERM and SIGINT during a run: the handlers only raise a flag, and the training loop acts on it at
// a step boundary (every rank learns whether any was signalled, and all save the same step).
#pragma once

#include <csignal>

namespace odyssey {

// Installs the stop handlers for its lifetime and restores the previous ones.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal received since the handlers were installed (0: none).
  static int received();

 private:
  struct sigaction old_term_ {
  }, old_int_{};
};

}  // namespace odyssey
