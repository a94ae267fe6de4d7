#include "odyssey/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <array>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"

namespace odyssey {

namespace {

// Files named by `pattern`, in byte order. A pattern without glob characters is taken as a path, so
// that a missing file is reported by the shard reader as "cannot open <path>".
std::vector<std::string> expand_pattern(const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  glob_t g{};
  // No GLOB_ERR: an unreadable or missing directory simply matches nothing.
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  ODY_CHECK(rc != GLOB_NOSPACE, "out of memory expanding data pattern '{}'", pattern);
  ODY_CHECK(rc == 0 && !paths.empty(), "data pattern '{}' matches no files", pattern);
  std::sort(paths.begin(), paths.end());  // glob(3) sorts by locale; we want the same order everywhere
  return paths;
}

// A pseudo-random permutation of [0, n) keyed by (seed, epoch), evaluated one index at a time: a
// balanced Feistel network over the smallest even-bit power-of-two domain >= n, with cycle walking to
// stay inside [0, n) (the domain is < 4n, so under 4 steps on average). Nothing is materialised, and
// the permutation is a pure function, so every rank computes the same order.
class FeistelPermutation {
 public:
  FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n), seed_(seed), epoch_(epoch) {
    int bits = 2;
    while (bits < 64 && (uint64_t(1) << bits) < n) bits += 2;
    half_bits_ = bits / 2;
    half_mask_ = (uint64_t(1) << half_bits_) - 1;
  }

  uint64_t operator()(uint64_t i) const {
    uint64_t x = i;
    do x = encrypt(x);
    while (x >= n_);
    return x;
  }

 private:
  static constexpr int kRounds = 6;

  uint64_t encrypt(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (int r = 0; r < kRounds; ++r) {
      uint64_t next = left ^ (round_function(right, r) & half_mask_);
      left = right;
      right = next;
    }
    return (left << half_bits_) | right;
  }

  uint64_t round_function(uint64_t value, int round) const {
    auto w = philox4x32({uint32_t(value), uint32_t(value >> 32), uint32_t(round), uint32_t(epoch_)},
                        {uint32_t(seed_), uint32_t(seed_ >> 32) ^ uint32_t(epoch_ >> 32)});
    return uint64_t(w[0]) | (uint64_t(w[1]) << 32);
  }

  uint64_t n_, seed_, epoch_;
  int half_bits_;
  uint64_t half_mask_;
};

// Tokens src[0, n) are window positions k0.. of a row: position k is input k (k < T) and target k-1.
// Shards of either width may be mixed in one data set; the ids (checked below the vocabulary, which
// is an int) are the same whatever the width.
template <typename Token>
void copy_span(const Token* src, uint64_t n, uint64_t T, uint64_t k0, int* inputs, int* targets) {
  for (uint64_t j = 0; j < n; ++j) {
    const uint64_t k = k0 + j;
    const int token = int(src[j]);
    if (k < T) inputs[k] = token;
    if (k > 0) targets[k - 1] = token;
  }
}

}  // namespace

struct TokenDataset::Impl {
  std::vector<TokenShard> shards;
  std::vector<uint64_t> starts;  // starts[s] = global index of shard s's first token; back() = total
  uint64_t rows_per_epoch = 0;
  bool shuffle = false;
  uint64_t seed = 0;
};

TokenDataset::TokenDataset(const std::string& pattern, int T, int vocab_size, bool shuffle, uint64_t seed)
    : impl_(std::make_shared<Impl>()), T_(T) {
  ODY_CHECK(T >= 1, "data '{}': sequence length must be at least 1, got {}", pattern, T);
  // No upper bound here: each shard checks its ids against the vocabulary, and a uint16 shard simply
  // cannot hold ids >= 65536.
  ODY_CHECK(vocab_size >= 1, "data '{}': vocabulary size must be at least 1, got {}", pattern, vocab_size);
  Impl& d = *impl_;
  d.shuffle = shuffle;
  d.seed = seed;
  d.starts.push_back(0);
  for (const std::string& path : expand_pattern(pattern)) {
    d.shards.emplace_back(path);
    d.shards.back().check_vocab(vocab_size);
    d.starts.push_back(d.starts.back() + d.shards.back().size());
  }
  const uint64_t total = d.starts.back();
  ODY_CHECK(total >= uint64_t(T) + 1,
            "data '{}' holds {} tokens in {} file(s), fewer than seq_len + 1 = {} needed for one row",
            pattern, total, d.shards.size(), uint64_t(T) + 1);
  d.rows_per_epoch = (total - 1) / uint64_t(T);
}

uint64_t TokenDataset::rows_per_epoch() const {
  return impl_->rows_per_epoch;
}

uint64_t TokenDataset::total_tokens() const {
  return impl_->starts.back();
}

void TokenDataset::get_row(uint64_t row, int* inputs, int* targets) const {
  const Impl& d = *impl_;
  const uint64_t epoch = row / d.rows_per_epoch;
  uint64_t index = row % d.rows_per_epoch;
  if (d.shuffle) index = FeistelPermutation(d.rows_per_epoch, d.seed, epoch)(index);

  // The window tokens[index*T, index*T+T] may span several shards: copy it span by span.
  const uint64_t T = uint64_t(T_);
  uint64_t pos = index * T;
  const uint64_t end = pos + T + 1;
  size_t s = size_t(std::upper_bound(d.starts.begin(), d.starts.end(), pos) - d.starts.begin()) - 1;
  uint64_t k = 0;
  while (pos < end) {
    while (pos >= d.starts[s + 1]) ++s;  // skips empty shards too
    const uint64_t n = std::min(end, d.starts[s + 1]) - pos;
    const TokenShard& shard = d.shards[s];
    const size_t first = size_t(pos - d.starts[s]);
    if (shard.width() == TokenWidth::u16) {
      copy_span(shard.tokens16() + first, n, T, k, inputs, targets);
    } else {
      copy_span(shard.tokens32() + first, n, T, k, inputs, targets);
    }
    k += n;
    pos += n;
  }
}

}  // namespace odyssey
