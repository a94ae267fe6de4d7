#include "odyssey/core/offload_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"

namespace odyssey {

namespace {
constexpr uint64_t kAlign = 4096;

uint64_t padded(size_t bytes) {
  return (uint64_t(bytes) + kAlign - 1) / kAlign * kAlign;
}

// pwrite / pread of all `bytes`, retried on short transfers and EINTR; the errno text on failure
// ("end of file" when a read finds less).
std::string transfer(bool write, int fd, void* data, size_t bytes, uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = write ? ::pwrite(fd, p, bytes, off_t(offset)) : ::pread(fd, p, bytes, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) return write ? "no progress" : "end of file";
    p += n, bytes -= size_t(n), offset += uint64_t(n);
  }
  return "";
}
}  // namespace

uint64_t OffloadFile::bytes_for(const std::vector<size_t>& record_bytes) {
  uint64_t total = 0;
  for (size_t b : record_bytes) total += padded(b);
  return total;
}

uint64_t OffloadFile::bytes_for(int records, size_t record_bytes) {
  return uint64_t(records) * padded(record_bytes);
}

OffloadFile::OffloadFile(const std::string& dir, int records, size_t record_bytes, std::string key,
                         std::string label, int first_label)
    : OffloadFile(dir, std::vector<size_t>(size_t(std::max(records, 0)), record_bytes), std::move(key),
                  [label = std::move(label), first_label](int r) {
                    return fmt::format("{} {}", label, first_label + r);
                  }) {}

OffloadFile::OffloadFile(const std::string& dir, std::vector<size_t> record_bytes, std::string key,
                         std::function<std::string(int)> name)
    : key_(std::move(key)),
      name_(std::move(name)),
      bytes_(std::move(record_bytes)),
      offsets_(bytes_.size() + 1, 0),
      checksums_(bytes_.size(), 0),
      written_(bytes_.size(), false) {
  for (size_t r = 0; r < bytes_.size(); ++r) offsets_[r + 1] = offsets_[r] + padded(bytes_[r]);
  const int records = int(bytes_.size());
  std::string templ = dir + "/layer-inputs-XXXXXX";
  fd_ = ::mkstemp(templ.data());
  ODY_CHECK(fd_ >= 0, "{}: cannot create a scratch file in '{}': {}", key_, dir, std::strerror(errno));
  path_ = templ;
  const uint64_t total = file_bytes();
  const int err = total > 0 ? ::posix_fallocate(fd_, 0, off_t(total)) : 0;
  ::unlink(path_.c_str());  // from here on only this process sees it; it goes when the fd is closed
  if (err != 0) {
    ::close(fd_);
    fail(
        "{}: cannot reserve {} bytes for {} record(s) of up to {} bytes in '{}': {}. Free space there, "
        "choose "
        "another {} or lower memory.disk_budget_gb to be refused before start-up",
        key_, total, records, records > 0 ? bytes_[0] : 0, path_, std::strerror(err), key_);
  }
  if (const char* k = std::getenv("ODYSSEY_OFFLOAD_CORRUPT")) corrupt_write_ = std::strtoull(k, nullptr, 10);
  thread_ = std::thread([this] { run(); });
}

OffloadFile::~OffloadFile() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  queued_.notify_all();
  thread_.join();
  ::close(fd_);
}

std::string OffloadFile::name(int record) const {
  return fmt::format("{} (record {} of scratch file '{}', unlinked, in {})", name_(record), record, path_,
                     key_);
}

uint64_t OffloadFile::issued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return issued_;
}

uint64_t OffloadFile::write(int record, const void* src) {
  ODY_CHECK(record >= 0 && size_t(record) < checksums_.size(), "offload write: record {} outside [0, {})",
            record, checksums_.size());
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back({true, record, const_cast<void*>(src)});
  queued_.notify_one();
  return ++issued_;
}

uint64_t OffloadFile::read(int record, void* dst) {
  ODY_CHECK(record >= 0 && size_t(record) < checksums_.size(), "offload read: record {} outside [0, {})",
            record, checksums_.size());
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back({false, record, dst});
  queued_.notify_one();
  return ++issued_;
}

void OffloadFile::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (completed_ < ticket && error_.empty()) {
    Timer timer;
    done_.wait(lock, [&] { return completed_ >= ticket || !error_.empty(); });
    stall_seconds_ += timer.seconds();
  }
  if (!error_.empty()) throw Error(error_);
}

void OffloadFile::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const Request r = queue_.front();
    queue_.pop_front();
    const bool skip = !error_.empty();
    lock.unlock();
    std::string error;
    if (!skip) try {
        execute(r);
      } catch (const Error& e) {
        error = e.what();
      }
    lock.lock();
    if (error_.empty()) error_ = error;
    if (!skip && error.empty()) (r.write ? bytes_written_ : bytes_read_) += bytes_[size_t(r.record)];
    ++completed_;
    done_.notify_all();
  }
}

void OffloadFile::execute(const Request& r) {
  const uint64_t offset = offsets_[size_t(r.record)];
  const size_t bytes = bytes_[size_t(r.record)];
  if (r.write) {
    checksums_[size_t(r.record)] = XXH3_64bits(r.data, bytes);
    const std::string err = transfer(true, fd_, r.data, bytes, offset);
    ODY_CHECK(err.empty(), "cannot write {}: {}", name(r.record), err);
    // Written through to the disk and dropped from the page cache: RAM holds no second copy.
    ODY_CHECK(::sync_file_range(
                  fd_, off_t(offset), off_t(bytes),
                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) == 0,
              "cannot write {}: {}", name(r.record), std::strerror(errno));
    ::posix_fadvise(fd_, off_t(offset), off_t(bytes), POSIX_FADV_DONTNEED);
    written_[size_t(r.record)] = true;
    if (++writes_ == corrupt_write_) flip_byte(r.record, bytes / 2);
    return;
  }
  ODY_CHECK(written_[size_t(r.record)], "cannot read {}: it was never written", name(r.record));
  const std::string err = transfer(false, fd_, r.data, bytes, offset);
  ODY_CHECK(err.empty(), "cannot read {}: {}", name(r.record), err);
  ::posix_fadvise(fd_, off_t(offset), off_t(bytes), POSIX_FADV_DONTNEED);
  const uint64_t sum = XXH3_64bits(r.data, bytes);
  ODY_CHECK(sum == checksums_[size_t(r.record)],
            "{} is corrupt: its xxh3-64 checksum is {:016x} on reading, {:016x} when written", name(r.record),
            sum, checksums_[size_t(r.record)]);
}

void OffloadFile::corrupt_for_test(int record, size_t offset) {
  wait(issued_);
  flip_byte(record, offset);
}

void OffloadFile::flip_byte(int record, size_t offset) {
  const uint64_t at = offsets_[size_t(record)] + offset;
  unsigned char byte = 0;
  ODY_CHECK(transfer(false, fd_, &byte, 1, at).empty(), "corrupt_for_test: cannot read {}", name(record));
  byte ^= 0x5a;
  ODY_CHECK(transfer(true, fd_, &byte, 1, at).empty(), "corrupt_for_test: cannot write {}", name(record));
}

}  // namespace odyssey
