#include "odyssey/train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "odyssey/core/error.h"

namespace odyssey {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  ODY_CHECK(fd_ >= 0, "log.metrics: cannot open {}: {}", path, std::strerror(errno));
  struct stat st;
  good_bytes_ = ::fstat(fd_, &st) == 0 ? st.st_size : 0;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // Cut the half-written line off, so the file stays whole lines of JSON (a full disk, a file size
      // limit); a file that cannot be truncated (a device) is left as it is.
      [[maybe_unused]] const int truncated = ::ftruncate(fd_, good_bytes_);
      fail("log.metrics: cannot write {} (after {} bytes of complete lines): {}", path_, good_bytes_,
           std::strerror(err));
    }
    done += size_t(n);
  }
  good_bytes_ += off_t(line.size());
}

}  // namespace odyssey
