// llm.c's token shard format: a header of 256 int32 (magic 20240520, version 1, token count), then
// the tokens as uint16. Shards are memory-mapped, never read whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace odyssey {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kShardHeaderInts = 256;

// A read-only, memory-mapped shard. Opening validates the header and the body size, naming the file
// and the byte offset of what is wrong.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  TokenShard(TokenShard&&) noexcept;
  TokenShard& operator=(TokenShard&&) noexcept;

  const std::string& path() const { return path_; }
  size_t size() const { return n_tokens_; }
  const uint16_t* tokens() const { return tokens_; }
  uint16_t operator[](size_t i) const { return tokens_[i]; }

  // Fails naming the file and the byte offset of the first token id >= vocab_size.
  void check_vocab(int vocab_size) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  size_t n_tokens_ = 0;
};

// Writes a shard atomically (temporary name, then rename).
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace odyssey
