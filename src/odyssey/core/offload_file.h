// A scratch file of records on a local disk, written and read by one background I/O thread
// (long-context-memory.md §4.6): the disk tier of the activation store keeps the layer inputs of a
// micro-batch here between its forward and its backward, one record per (layer, row chunk).
//
// - Records lie in order, each at a 4096-byte aligned offset, its length padded to 4096 bytes.
// - The file is created in `dir` under a unique name, preallocated whole (posix_fallocate) so a full
//   disk fails here, at set-up, not in a step, and unlinked at once: nothing is left behind when the
//   process ends, however it ends, and a second job using the same directory never sees it.
// - write() and read() only enqueue: the I/O thread runs the requests in order, blocking in the
//   system calls (it never spins: the compute threads keep the cores). wait(ticket) blocks until that
//   request and every one before it are done, and counts the time it blocked (the I/O stall).
// - Each written record's xxh3-64 checksum is kept and checked when it is read back: a mismatch, a
//   short read or an I/O error is an odyssey::Error naming the file, the record and the key.
// - Written pages are flushed and dropped from the page cache (sync_file_range + POSIX_FADV_DONTNEED),
//   so the file does not fill RAM with dirty pages and count twice.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace odyssey {

class OffloadFile {
 public:
  // One record per entry of record_bytes (its length in bytes), in dir. key names the directory's
  // setting in errors ("memory.offload_dir"); name(r) names record r ("the input of layer 3, chunk 1").
  OffloadFile(const std::string& dir, std::vector<size_t> record_bytes, std::string key,
              std::function<std::string(int)> name);
  // records x record_bytes; record r is called "<label> <first_label + r>".
  OffloadFile(const std::string& dir, int records, size_t record_bytes, std::string key, std::string label,
              int first_label = 0);
  ~OffloadFile();  // finishes the queued requests (errors then ignored) and closes the file
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  // The file's size for these records (each padded to 4096 bytes).
  static uint64_t bytes_for(const std::vector<size_t>& record_bytes);
  static uint64_t bytes_for(int records, size_t record_bytes);

  // Enqueue: src / dst (record_bytes(record)) must stay untouched until wait() returns for the ticket.
  uint64_t write(int record, const void* src);
  uint64_t read(int record, void* dst);
  // Blocks until request `ticket` (and all before it) is done; throws the first error of any request.
  void wait(uint64_t ticket);

  const std::string& path() const { return path_; }  // the (unlinked) file's name
  uint64_t file_bytes() const { return offsets_.back(); }
  int records() const { return int(bytes_.size()); }
  size_t record_bytes(int record) const { return bytes_[size_t(record)]; }
  uint64_t issued() const;  // the ticket of the last request enqueued (0: none)
  double stall_seconds() const { return stall_seconds_; }  // time wait() blocked
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t bytes_read() const { return bytes_read_; }

  // Test hook: flips byte `offset` of record r on disk (after the queued requests), so the next read
  // of r fails its checksum. The environment variable ODYSSEY_OFFLOAD_CORRUPT=k does the same to the
  // k-th record written by each file (counting from 1), for tests of a failing step in a whole run.
  void corrupt_for_test(int record, size_t offset);

 private:
  struct Request {
    bool write;
    int record;
    void* data;
  };
  void run();  // the I/O thread
  void execute(const Request& r);
  void flip_byte(int record, size_t offset);
  std::string name(int record) const;

  std::string path_, key_;
  std::function<std::string(int)> name_;
  int fd_ = -1;
  std::vector<size_t> bytes_;                // per record
  std::vector<uint64_t> offsets_;            // per record, and the file's size last
  std::vector<uint64_t> checksums_;          // per record, of its last write (I/O thread only)
  std::vector<bool> written_;                // I/O thread only
  uint64_t writes_ = 0, corrupt_write_ = 0;  // I/O thread only: writes so far, ODYSSEY_OFFLOAD_CORRUPT

  mutable std::mutex mutex_;
  std::condition_variable queued_, done_;
  std::deque<Request> queue_;
  uint64_t issued_ = 0, completed_ = 0;
  std::string error_;  // the first failure; later requests are skipped
  bool stop_ = false;
  double stall_seconds_ = 0;
  uint64_t bytes_written_ = 0, bytes_read_ = 0;
  std::thread thread_;
};

}  // namespace odyssey
