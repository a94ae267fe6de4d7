// A run directory (checkpoint.dir) belongs to one run: claimed before any training, so that no step is
// trained that cannot be saved and no other run's checkpoints are mixed with this one's.
#pragma once

#include <string>

namespace odyssey {

struct CheckpointConfig;

// Held for the whole run by the rank that writes the manifest and metrics (rank 0): an exclusive lock
// on <dir>/.lock, released when the process ends (a killed run leaves no stale lock).
class RunDirectoryLock {
 public:
  RunDirectoryLock() = default;
  explicit RunDirectoryLock(const std::string& dir);
  ~RunDirectoryLock();
  RunDirectoryLock(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock& operator=(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Claims checkpoint.dir for a run whose metrics go to metrics_path, failing with an error that names
// the directory and the keys to change:
// - the directory is created and must be writable (probed with a file), not discovered at the first
//   save after hours of training;
// - another live job holding it is refused;
// - a fresh run (resume = false) refuses a directory that holds complete checkpoints or a metrics
//   file of another run, unless checkpoint.overwrite = true, which deletes them first;
// - resume = true with no checkpoint to resume from starts from step 0 and says so (returns a
//   message for the log; empty otherwise).
// Run on one rank (rank 0); the caller shares the outcome.
std::string claim_run_directory(const CheckpointConfig& checkpoint, const std::string& metrics_path,
                                RunDirectoryLock& lock);

}  // namespace odyssey
