#include "odyssey/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace odyssey {

namespace {

constexpr size_t kHeaderBytes = kShardHeaderInts * sizeof(int32_t);
// The format is little-endian and we map it as it is.
static_assert(std::endian::native == std::endian::little);

// Closes the descriptor on every path out of the constructor, including a throw.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TokenShard::TokenShard(const std::string& path) : path_(path) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  ODY_CHECK(file.fd >= 0, "cannot open token shard {}: {}", path, std::strerror(errno));
  struct stat st;
  ODY_CHECK(::fstat(file.fd, &st) == 0, "cannot stat token shard {}: {}", path, std::strerror(errno));
  ODY_CHECK(S_ISREG(st.st_mode), "token shard {} is not a regular file", path);
  const size_t file_bytes = size_t(st.st_size);
  ODY_CHECK(file_bytes >= kHeaderBytes,
            "token shard {}: truncated header: the file ends at byte offset {}, the header needs {} bytes",
            path, file_bytes, kHeaderBytes);

  int32_t header[kShardHeaderInts];
  size_t got = 0;
  while (got < kHeaderBytes) {
    ssize_t n = ::pread(file.fd, reinterpret_cast<char*>(header) + got, kHeaderBytes - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    ODY_CHECK(n > 0, "cannot read the header of token shard {} at byte offset {}: {}", path, got,
              n == 0 ? "unexpected end of file" : std::strerror(errno));
    got += size_t(n);
  }
  ODY_CHECK(header[0] == kShardMagic,
            "token shard {}: bad magic {} at byte offset 0 (expected {}; not an llm.c token shard?)", path,
            header[0], kShardMagic);
  ODY_CHECK(header[1] == kShardVersion,
            "token shard {}: unsupported version {} at byte offset 4 (expected {}: uint16 tokens)", path,
            header[1], kShardVersion);
  ODY_CHECK(header[2] >= 0, "token shard {}: negative token count {} at byte offset 8", path, header[2]);
  n_tokens_ = size_t(header[2]);
  const size_t expected = kHeaderBytes + n_tokens_ * sizeof(uint16_t);
  ODY_CHECK(file_bytes >= expected,
            "token shard {}: truncated body: the file ends at byte offset {} but the header declares {} "
            "tokens (byte offset 8), which end at byte offset {}",
            path, file_bytes, n_tokens_, expected);
  ODY_CHECK(file_bytes == expected,
            "token shard {}: {} unexpected bytes after the last token, from byte offset {} (the header "
            "declares {} tokens at byte offset 8)",
            path, file_bytes - expected, expected, n_tokens_);

  // Map the whole file (offsets must be page aligned); an empty body still maps the header.
  map_bytes_ = file_bytes;
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, file.fd, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("cannot map token shard {}: {}", path, std::strerror(errno));
  }
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kHeaderBytes);
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      n_tokens_(std::exchange(other.n_tokens_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, map_bytes_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    n_tokens_ = std::exchange(other.n_tokens_, 0);
  }
  return *this;
}

void TokenShard::check_vocab(int vocab_size) const {
  if (vocab_size >= 65536) return;  // every uint16 fits
  const uint16_t limit = uint16_t(std::max(vocab_size, 0));
  const int64_t n = int64_t(n_tokens_);
  int64_t first_bad = n;
  // Parallel scan: shards are up to 100M tokens and are checked once at open.
#pragma omp parallel for reduction(min : first_bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (tokens_[i] >= limit && i < first_bad) first_bad = i;
  }
  ODY_CHECK(first_bad == n,
            "token shard {}: token id {} at byte offset {} (token {}) is not below the vocabulary size {}",
            path_, tokens_[first_bad], kHeaderBytes + size_t(first_bad) * sizeof(uint16_t), first_bad,
            vocab_size);
}

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  ODY_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()),
            "cannot write token shard {}: {} tokens exceed the format's int32 count", path, tokens.size());
  std::vector<uint8_t> bytes(kHeaderBytes + tokens.size() * sizeof(uint16_t), 0);
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = int32_t(tokens.size());
  std::memcpy(bytes.data(), header, kHeaderBytes);
  if (!tokens.empty()) {
    std::memcpy(bytes.data() + kHeaderBytes, tokens.data(), tokens.size() * sizeof(uint16_t));
  }
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace odyssey
