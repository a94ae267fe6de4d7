// llm.c's token shard formats (dev/data/data_common.py write_datafile; llmc/dataloader.h reads both).
// A header of 256 little-endian int32, then the tokens:
//   header[0]  magic     20240520 ("gpt-2")  or 20240801 ("llama-3")
//   header[1]  version   1                   or 7
//   header[2]  token count (the body holds exactly this many tokens)
//   header[3..255]  zero
//   body       uint16 tokens                or uint32 tokens
// The magic and the version together name the token width; any other pair is refused. Shards are
// memory-mapped, never read whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace odyssey {

constexpr size_t kShardHeaderInts = 256;
constexpr int32_t kShardMagic16 = 20240520;
constexpr int32_t kShardVersion16 = 1;
constexpr int32_t kShardMagic32 = 20240801;
constexpr int32_t kShardVersion32 = 7;

enum class TokenWidth { u16, u32 };

inline size_t token_bytes(TokenWidth width) {
  return width == TokenWidth::u16 ? 2 : 4;
}

// The width a vocabulary needs: uint16 while every id fits (so such data stays byte-identical to
// llm.c's GPT-2 shards), uint32 above 65,536 ids.
inline TokenWidth token_width_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenWidth::u16 : TokenWidth::u32;
}

// A read-only, memory-mapped shard of either width. Opening validates the header and the body size,
// naming the file and the byte offset of what is wrong.
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
  TokenWidth width() const { return width_; }
  uint32_t operator[](size_t i) const {
    return width_ == TokenWidth::u16 ? static_cast<const uint16_t*>(tokens_)[i]
                                     : static_cast<const uint32_t*>(tokens_)[i];
  }
  // The raw body of a shard of that width (fails on the other width).
  const uint16_t* tokens16() const;
  const uint32_t* tokens32() const;

  // Fails naming the file and the byte offset of the first token id >= vocab_size.
  void check_vocab(int64_t vocab_size) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  size_t n_tokens_ = 0;
  TokenWidth width_ = TokenWidth::u16;
};

// Writes a shard atomically (temporary name, then rename): uint16 tokens in the gpt-2 format.
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// Writes a shard of the given width atomically; fails naming the file and the index of the first
// token that does not fit a uint16 shard.
void write_token_shard(const std::string& path, std::span<const uint32_t> tokens, TokenWidth width);

}  // namespace odyssey
