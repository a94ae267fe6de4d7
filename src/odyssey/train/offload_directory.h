// One rank's directory for the disk tier's scratch files (memory.tier = disk): created inside
// memory.offload_dir as odyssey-<host>-rank<r>-XXXXXX, so ranks, and jobs sharing the directory, never
// touch each other's files, and removed with its content when the run ends, normally or by an error.
// (The scratch files themselves are unlinked as soon as they are created, core/offload_file.h: a
// killed process leaves at most this empty directory.) The checkpoint directory is never used.
#pragma once

#include <string>

namespace odyssey {

class OffloadDirectory {
 public:
  OffloadDirectory() = default;
  // Fails naming memory.offload_dir when it cannot be created.
  OffloadDirectory(const std::string& parent, int rank);
  ~OffloadDirectory();
  OffloadDirectory(const OffloadDirectory&) = delete;
  OffloadDirectory& operator=(const OffloadDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace odyssey
