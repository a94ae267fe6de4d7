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
  ODY_CHECK(header[0] == kShardMagic16 || header[0] == kShardMagic32,
            "token shard {}: bad magic {} at byte offset 0 (expected {} for uint16 or {} for uint32 tokens; "
            "not an llm.c token shard?)",
            path, header[0], kShardMagic16, kShardMagic32);
  width_ = header[0] == kShardMagic16 ? TokenWidth::u16 : TokenWidth::u32;
  const int32_t version = width_ == TokenWidth::u16 ? kShardVersion16 : kShardVersion32;
  ODY_CHECK(
      header[1] == version,
      "token shard {}: unsupported version {} at byte offset 4 (magic {} expects version {}: {} tokens)",
      path, header[1], header[0], version, width_ == TokenWidth::u16 ? "uint16" : "uint32");
  ODY_CHECK(header[2] >= 0, "token shard {}: negative token count {} at byte offset 8", path, header[2]);
  n_tokens_ = size_t(header[2]);
  const size_t expected = kHeaderBytes + n_tokens_ * token_bytes(width_);
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
  tokens_ = static_cast<const char*>(map_) + kHeaderBytes;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      n_tokens_(std::exchange(other.n_tokens_, 0)),
      width_(other.width_) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, map_bytes_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    n_tokens_ = std::exchange(other.n_tokens_, 0);
    width_ = other.width_;
  }
  return *this;
}

const uint16_t* TokenShard::tokens16() const {
  ODY_CHECK(width_ == TokenWidth::u16, "token shard {} holds uint32 tokens, not uint16", path_);
  return static_cast<const uint16_t*>(tokens_);
}

const uint32_t* TokenShard::tokens32() const {
  ODY_CHECK(width_ == TokenWidth::u32, "token shard {} holds uint16 tokens, not uint32", path_);
  return static_cast<const uint32_t*>(tokens_);
}

namespace {

// Index of the first token >= limit, or n. Parallel: shards are up to 100M tokens, checked once at open.
template <typename Token>
int64_t first_at_or_above(const Token* tokens, int64_t n, uint64_t limit) {
  int64_t first_bad = n;
#pragma omp parallel for reduction(min : first_bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (uint64_t(tokens[i]) >= limit && i < first_bad) first_bad = i;
  }
  return first_bad;
}

}  // namespace

void TokenShard::check_vocab(int64_t vocab_size) const {
  const uint64_t limit = uint64_t(std::max<int64_t>(vocab_size, 0));
  const int64_t n = int64_t(n_tokens_);
  const int64_t first_bad = width_ == TokenWidth::u16 ? first_at_or_above(tokens16(), n, limit)
                                                      : first_at_or_above(tokens32(), n, limit);
  ODY_CHECK(first_bad == n,
            "token shard {}: token id {} at byte offset {} (token {}) is not below the vocabulary size {}",
            path_, (*this)[size_t(first_bad)], kHeaderBytes + size_t(first_bad) * token_bytes(width_),
            first_bad, vocab_size);
}

namespace {

void write_shard_bytes(const std::string& path, size_t n_tokens, TokenWidth width, const void* body) {
  ODY_CHECK(n_tokens <= size_t(std::numeric_limits<int32_t>::max()),
            "cannot write token shard {}: {} tokens exceed the format's int32 count", path, n_tokens);
  const size_t body_bytes = n_tokens * token_bytes(width);
  std::vector<uint8_t> bytes(kHeaderBytes + body_bytes, 0);
  int32_t header[kShardHeaderInts] = {};
  header[0] = width == TokenWidth::u16 ? kShardMagic16 : kShardMagic32;
  header[1] = width == TokenWidth::u16 ? kShardVersion16 : kShardVersion32;
  header[2] = int32_t(n_tokens);
  std::memcpy(bytes.data(), header, kHeaderBytes);
  if (body_bytes) std::memcpy(bytes.data() + kHeaderBytes, body, body_bytes);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard_bytes(path, tokens.size(), TokenWidth::u16, tokens.data());
}

void write_token_shard(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width) {
  if (width == TokenWidth::u32) {
    write_shard_bytes(path, tokens.size(), width, tokens.data());
    return;
  }
  std::vector<uint16_t> narrow(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    ODY_CHECK(tokens[i] <= 0xFFFF,
              "cannot write token shard {}: token {} is id {}, which does not fit uint16", path, i,
              tokens[i]);
    narrow[i] = uint16_t(tokens[i]);
  }
  write_token_shard(path, narrow);
}

}  // namespace odyssey
