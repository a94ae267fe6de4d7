#include "odyssey/train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/core/error.h"
#include "odyssey/train/config.h"

namespace fs = std::filesystem;

namespace odyssey {

RunDirectoryLock::RunDirectoryLock(const std::string& dir) {
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ODY_CHECK(fd_ >= 0, "checkpoint.dir {}: cannot create {}: {}", dir, path, std::strerror(errno));
  // A job restarted right after a kill may start before the killed ranks have exited: wait up to 10 s
  // for the lock before calling the directory taken.
  int rc = -1, err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
    err = errno;
    if (rc == 0 || err != EWOULDBLOCK) break;
    ::usleep(100'000);
  }
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
    ODY_CHECK(err != EWOULDBLOCK,
              "checkpoint.dir {} is in use by another running job (it holds {}); wait for it, or choose "
              "another checkpoint.dir",
              dir, path);
    fail("checkpoint.dir {}: cannot lock {}: {}", dir, path, std::strerror(err));
  }
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

RunDirectoryLock::RunDirectoryLock(RunDirectoryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

RunDirectoryLock& RunDirectoryLock::operator=(RunDirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

namespace {

// A save needs to create files and directories here: try it now rather than after hours of training.
void check_writable(const std::string& dir) {
  const std::string probe = dir + "/.write_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ODY_CHECK(fd >= 0, "checkpoint.dir {} is not writable: {}", dir, std::strerror(errno));
  const bool wrote = ::write(fd, "x", 1) == 1;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  ODY_CHECK(wrote, "checkpoint.dir {} is not writable: {}", dir, std::strerror(err));
}

}  // namespace

std::string claim_run_directory(const CheckpointConfig& checkpoint, const std::string& metrics_path,
                                RunDirectoryLock& lock) {
  const std::string& dir = checkpoint.dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  ODY_CHECK(!ec && fs::is_directory(dir), "checkpoint.dir {}: cannot create the directory: {}", dir,
            ec ? ec.message() : "a file of that name exists");
  check_writable(dir);
  lock = RunDirectoryLock(dir);

  const std::string latest = find_latest_checkpoint(dir);
  if (checkpoint.resume)
    return latest.empty() ? "checkpoint.resume: no checkpoint in " + dir + " yet; starting from step 0" : "";

  const bool has_metrics = fs::exists(metrics_path) && fs::file_size(metrics_path, ec) > 0;
  if (latest.empty() && !has_metrics) return "";
  if (!checkpoint.overwrite) {
    const std::string what =
        !latest.empty() ? "checkpoints of another run (newest " + fs::path(latest).filename().string() + ")"
                        : "another run's metrics (" + metrics_path + ")";
    fail(
        "checkpoint.dir {} holds {}: set checkpoint.resume=true to continue that run, choose another "
        "checkpoint.dir, or set checkpoint.overwrite=true to delete them and start afresh",
        dir, what);
  }
  // overwrite: the old run's checkpoints (complete or not) and metrics go before this run writes any.
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && (name.rfind("step_", 0) == 0 || name.rfind(".step_", 0) == 0))
      fs::remove_all(e.path());
  }
  fs::remove(metrics_path, ec);
  return "checkpoint.overwrite: removed the previous run's checkpoints and metrics from " + dir;
}

}  // namespace odyssey
