#include "odyssey/train/offload_directory.h"

#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "odyssey/core/error.h"
#include "odyssey/core/log.h"

namespace odyssey {

namespace {
constexpr long kTmpfsMagic = 0x01021994;  // TMPFS_MAGIC (linux/magic.h)
}

OffloadDirectory::OffloadDirectory(const std::string& parent, int rank) {
  char host[256] = "host";
  ::gethostname(host, sizeof(host) - 1);
  std::string templ = fmt::format("{}/odyssey-{}-rank{}-XXXXXX", parent, host, rank);
  ODY_CHECK(::mkdtemp(templ.data()) != nullptr,
            "memory.offload_dir '{}': cannot create a scratch directory: {}", parent, std::strerror(errno));
  path_ = templ;
  struct statfs fs {};
  if (rank == 0 && ::statfs(path_.c_str(), &fs) == 0 && long(fs.f_type) == kTmpfsMagic)
    log_info("warning: memory.offload_dir '{}' is a tmpfs: the disk tier's layer inputs stay in RAM there",
             parent);
}

OffloadDirectory::~OffloadDirectory() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort: a destructor does not throw
}

}  // namespace odyssey
