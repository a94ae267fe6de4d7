#include "odyssey/core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "odyssey/core/error.h"

namespace odyssey {

void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ODY_CHECK(fd >= 0, "cannot create {}: {}", tmp, std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write {}: {}", tmp, std::strerror(err));
    }
    p += n;
    left -= size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot flush {}: {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

std::vector<uint8_t> read_binary_file(const std::string& path) {
  // Read in chunks rather than seeking to the end, so pipes and /dev/fd paths work too.
  std::ifstream in(path, std::ios::binary);
  ODY_CHECK(in, "cannot open {}: {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0)
    bytes.insert(bytes.end(), chunk, chunk + in.gcount());
  ODY_CHECK(in.eof(), "cannot read {}", path);
  return bytes;
}

std::string read_text_file(const std::string& path) {
  auto bytes = read_binary_file(path);
  return std::string(bytes.begin(), bytes.end());
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace odyssey
