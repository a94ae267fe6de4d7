#include "odyssey/data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <unordered_map>
#include <utility>

#include "odyssey/core/error.h"
#include "odyssey/core/string_view_hash.h"

namespace odyssey {

namespace {

// Unicode White_Space, which is what `\s` means to tiktoken's regex engine.
constexpr std::string_view kSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

// (left rank, right rank) -> rank of the concatenation (which is the merged token's id), open
// addressing: probed once per candidate pair, the hot lookup of the merge loop.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int rank = 0;
  };

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    shift_ = 60;
    while (cap < 2 * n) cap *= 2, --shift_;
    slots_.resize(cap);
    mask_ = cap - 1;
  }
  // False when the pair is already there.
  bool insert(int left, int right, int rank) {
    uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {k, rank};
        return true;
      }
    }
  }
  const Entry* find(int left, int right) const {
    uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static uint64_t key(int left, int right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  // Fibonacci hashing: the top bits of the product mix both ids.
  size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 60;
};

// Encoded pieces, open addressing over an arena of keys and ids: a lookup is one hash and usually one
// probe, where std::unordered_map chased a node pointer per bucket (a cache miss on every piece).
class PieceCache {
 public:
  static constexpr size_t kMaxPiece = 128;  // longer pieces are rare and not worth keeping

  const int* find(std::string_view piece, uint64_t hash, size_t& count) const {
    if (slots_.empty()) return nullptr;  // allocated on first insert: short encodes stay cheap
    for (size_t i = hash & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return nullptr;
      if (s.hash == hash && s.key_len == piece.size() && keys_.compare(s.key, s.key_len, piece) == 0) {
        count = s.count;
        return ids_.data() + s.ids;
      }
    }
  }
  void insert(std::string_view piece, uint64_t hash, const int* ids, size_t count) {
    if (2 * (entries_ + 1) > slots_.size()) grow();
    size_t i = hash & (slots_.size() - 1);
    while (slots_[i].key_len != 0) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = {hash, uint32_t(keys_.size()), uint32_t(ids_.size()), uint16_t(piece.size()),
                 uint16_t(count)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + count);
    ++entries_;
  }

 private:
  static constexpr size_t kMinSlots = size_t(1) << 12, kMaxSlots = size_t(1) << 18;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key = 0, ids = 0;
    uint16_t key_len = 0, count = 0;  // key_len 0: empty (cached pieces have 2 bytes or more)
  };
  void grow() {
    if (slots_.size() >= kMaxSlots) {  // bound memory on text with endless distinct words: start over
      std::fill(slots_.begin(), slots_.end(), Slot{});
      keys_.clear();
      ids_.clear();
      entries_ = 0;
      return;
    }
    std::vector<Slot> old(std::max(kMinSlots, slots_.size() * 2));
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.key_len == 0) continue;
      size_t i = s.hash & (slots_.size() - 1);
      while (slots_[i].key_len != 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int> ids_;
  size_t entries_ = 0;
};

// Scratch for one thread: regex match data, the merge heap and a cache of encoded pieces (natural
// text repeats its words, so most pieces are encoded once per thread).
struct State {
  explicit State(const pcre2_code* re) : match(pcre2_match_data_create_from_pattern(re, nullptr)) {
    ODY_CHECK(match != nullptr, "BPE tokenizer: out of memory for regex match data");
  }
  ~State() { pcre2_match_data_free(match); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  pcre2_match_data* match;
  std::vector<int> ids;
  std::vector<uint32_t> next, prev;
  std::vector<uint64_t> heap;
  PieceCache cache;
};

std::atomic<uint64_t> next_instance{1};

}  // namespace

std::string pcre2_pattern_from_tiktoken(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kSpace) : "[" + std::string(kSpace) + "]";
      } else if (e == 'S') {
        ODY_CHECK(!in_class,
                  "pre-tokenisation pattern: \\S inside a character class (at byte {}) is not supported",
                  i - 1);
        out += "[^" + std::string(kSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct BpeTokenizer::Impl {
  std::string name;
  std::vector<std::string> token_bytes;  // id -> bytes (ranks, then special literals)
  std::vector<bool> is_token;            // false for ids in gaps between ranks and special tokens
  std::unordered_map<std::string, int, StringViewHash, std::equal_to<>> rank_of;  // bytes -> rank
  std::array<int, 256> byte_rank{};                                               // single byte -> rank
  std::unique_ptr<MergeTable> merges;
  std::vector<std::pair<std::string, int>> specials;
  std::array<bool, 256> special_first{};  // bytes that start some special token
  int separator = -1;
  pcre2_code* regex = nullptr;
  const uint64_t instance = next_instance.fetch_add(1);  // tells thread-local scratch whose it is

  ~Impl() { pcre2_code_free(regex); }

  State& local_state() const;

  void build(BpeVocabulary& vocab);
  void compile_regex(const std::string& pattern, const std::string& source);
  void encode_into(State& st, std::string_view text, std::vector<int>& out) const;
  void encode_piece(State& st, std::string_view piece, std::vector<int>& out) const;
  void bpe(State& st, std::string_view piece, std::vector<int>& out) const;
};

void BpeTokenizer::Impl::build(BpeVocabulary& vocab) {
  const std::string& src = vocab.source;
  name = vocab.name;
  const size_t n = vocab.ranks.size();
  ODY_CHECK(n >= 256, "{}: {} ranks; a byte-level BPE needs at least the 256 single bytes", src, n);
  rank_of.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    ODY_CHECK(!vocab.ranks[r].empty(), "{}: rank {} is an empty token", src, r);
    ODY_CHECK(rank_of.emplace(vocab.ranks[r], int(r)).second, "{}: rank {} repeats the bytes of rank {}", src,
              r, rank_of.find(vocab.ranks[r])->second);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    auto it = rank_of.find(std::string_view(&byte, 1));
    ODY_CHECK(it != rank_of.end(), "{}: no token for the single byte 0x{:02x}", src, b);
    byte_rank[size_t(b)] = it->second;
  }
  // Every way to cut a token into two tokens is a merge: the pair's rank is the token's. This is
  // tiktoken's rule (the rank of the concatenation), precomputed per pair.
  std::vector<std::array<int, 3>> pairs;  // (left, right, rank)
  for (size_t r = 0; r < n; ++r) {
    const std::string_view t = vocab.ranks[r];
    for (size_t k = 1; k < t.size(); ++k) {
      auto left = rank_of.find(t.substr(0, k));
      if (left == rank_of.end()) continue;
      auto right = rank_of.find(t.substr(k));
      if (right != rank_of.end()) pairs.push_back({left->second, right->second, int(r)});
    }
  }
  merges = std::make_unique<MergeTable>(pairs.size());
  for (const auto& [l, r, rank] : pairs) merges->insert(l, r, rank);  // a pair determines its bytes

  int size = int(n);
  for (const auto& [literal, id] : vocab.specials) {
    ODY_CHECK(!literal.empty(), "{}: special token {} is empty", src, id);
    ODY_CHECK(id >= int(n), "{}: special token {} has id {}, which is a rank (0..{})", src, literal, id,
              n - 1);
    size = std::max(size, id + 1);
  }
  token_bytes = std::move(vocab.ranks);
  token_bytes.resize(size_t(size));
  is_token.assign(size_t(size), false);
  std::fill(is_token.begin(), is_token.begin() + std::ptrdiff_t(n), true);
  for (const auto& [literal, id] : vocab.specials) {
    ODY_CHECK(!is_token[size_t(id)], "{}: special token {} reuses id {}", src, literal, id);
    token_bytes[size_t(id)] = literal;
    is_token[size_t(id)] = true;
    special_first[uint8_t(literal[0])] = true;
    if (literal == vocab.separator) separator = id;
  }
  ODY_CHECK(vocab.separator.empty() || separator >= 0, "{}: no special token {} (the document separator)",
            src, vocab.separator);
  specials = std::move(vocab.specials);
  // Longest first, so a literal that is a prefix of another never hides it.
  std::sort(specials.begin(), specials.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  compile_regex(vocab.pattern, src);
}

void BpeTokenizer::Impl::compile_regex(const std::string& tiktoken_pattern, const std::string& source) {
  ODY_CHECK(!tiktoken_pattern.empty(), "{}: empty pre-tokenisation pattern", source);
  std::string pattern;
  try {
    pattern = pcre2_pattern_from_tiktoken(tiktoken_pattern);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  int err = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 is never matched instead of failing the whole subject.
  regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (regex == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(err, message, sizeof(message));
    fail("{}: cannot compile the pre-tokenisation pattern (at byte {} of its PCRE2 form {}): {}", source,
         offset, pattern, reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter still works
}

// One State per thread, kept across calls so that the piece cache stays warm however the text is cut
// into calls (encode per document from the caller's own threads, or encode_batch). Rebuilt when the
// thread turns to another tokenizer; its memory is bounded by PieceCache's limit.
State& BpeTokenizer::Impl::local_state() const {
  thread_local uint64_t owner = 0;
  thread_local std::unique_ptr<State> state;
  if (owner != instance || state == nullptr) {
    state = std::make_unique<State>(regex);
    owner = instance;
  }
  return *state;
}

void BpeTokenizer::Impl::encode_into(State& st, std::string_view text, std::vector<int>& out) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = pcre2_match(regex, subject, text.size(), pos, 0, st.match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid UTF-8 is left
      encode_piece(st, text.substr(pos), out);
      break;
    }
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      fail("{} tokenizer: regex match failed at byte {}: {}", name, pos,
           reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.match);
    ODY_CHECK(ov[1] > ov[0], "{} tokenizer: empty regex match at byte {}", name, ov[0]);
    // Every valid character matches some alternative, so a skipped span is a run of invalid UTF-8.
    if (ov[0] > pos) encode_piece(st, text.substr(pos, ov[0] - pos), out);
    encode_piece(st, text.substr(ov[0], ov[1] - ov[0]), out);
    pos = ov[1];
  }
}

void BpeTokenizer::Impl::encode_piece(State& st, std::string_view piece, std::vector<int>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_rank[uint8_t(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= PieceCache::kMaxPiece;
  uint64_t hash = 0;
  if (cacheable) {
    hash = XXH3_64bits(piece.data(), piece.size());
    size_t count = 0;
    if (const int* ids = st.cache.find(piece, hash, count)) {
      out.insert(out.end(), ids, ids + count);
      return;
    }
  }
  const size_t first = out.size();
  if (auto it = rank_of.find(piece); it != rank_of.end()) {
    out.push_back(it->second);  // a whole piece that is a token is that token, as in tiktoken
  } else {
    bpe(st, piece, out);
  }
  if (cacheable) st.cache.insert(piece, hash, out.data() + first, out.size() - first);
}

// Merges adjacent tokens of one piece, lowest rank first and leftmost first among equal ranks, as
// tiktoken does. The tokens form a linked list and candidate merges sit in a min-heap keyed (rank,
// position), so a piece of n bytes costs O(n log n), not O(n^2). A heap entry is stale when its left
// token has been absorbed or the pair at its position now has another rank: a token only grows, so
// the same rank at the same position means the same pair.
void BpeTokenizer::Impl::bpe(State& st, std::string_view piece, std::vector<int>& out) const {
  const size_t n = piece.size();
  ODY_CHECK(n < (size_t(1) << 31), "{} tokenizer: a single piece of {} bytes is too long", name, n);
  const auto end = uint32_t(n);
  st.ids.resize(n);
  st.next.resize(n);
  st.prev.resize(n);
  st.heap.clear();
  for (size_t i = 0; i < n; ++i) {
    st.ids[i] = byte_rank[uint8_t(piece[i])];
    st.next[i] = uint32_t(i + 1);
    st.prev[i] = uint32_t(i) - 1;  // wraps to UINT32_MAX for the first token: "none"
  }
  auto candidate = [&](uint32_t i) {
    uint32_t j = st.next[i];
    if (j == end) return;
    if (const auto* m = merges->find(st.ids[i], st.ids[j])) st.heap.push_back((uint64_t(m->rank) << 32) | i);
  };
  for (uint32_t i = 0; i + 1 < end; ++i) candidate(i);
  std::make_heap(st.heap.begin(), st.heap.end(), std::greater<>());
  auto push = [&](uint32_t i) {
    size_t before = st.heap.size();
    candidate(i);
    if (st.heap.size() != before) std::push_heap(st.heap.begin(), st.heap.end(), std::greater<>());
  };
  while (!st.heap.empty()) {
    std::pop_heap(st.heap.begin(), st.heap.end(), std::greater<>());
    const uint64_t top = st.heap.back();
    st.heap.pop_back();
    const auto i = uint32_t(top), rank = uint32_t(top >> 32);
    if (st.ids[i] < 0) continue;  // absorbed by its left neighbour
    const uint32_t j = st.next[i];
    if (j == end) continue;
    const auto* m = merges->find(st.ids[i], st.ids[j]);
    if (m == nullptr || uint32_t(m->rank) != rank) continue;
    st.ids[i] = m->rank;
    st.ids[j] = -1;
    st.next[i] = st.next[j];
    if (st.next[j] != end) st.prev[st.next[j]] = i;
    if (st.prev[i] != std::numeric_limits<uint32_t>::max()) push(st.prev[i]);
    push(i);
  }
  for (uint32_t i = 0; i != end; i = st.next[i]) out.push_back(st.ids[i]);
}

BpeTokenizer::BpeTokenizer(BpeVocabulary vocab) : impl_(std::make_unique<Impl>()) {
  impl_->build(vocab);
}

BpeTokenizer::~BpeTokenizer() = default;

int BpeTokenizer::vocab_size() const {
  return int(impl_->token_bytes.size());
}
int BpeTokenizer::eot_id() const {
  return impl_->separator;
}
std::string BpeTokenizer::name() const {
  return impl_->name;
}

std::vector<int> BpeTokenizer::encode(std::string_view text) const {
  State& st = impl_->local_state();
  std::vector<int> out;
  out.reserve(text.size() / 4 + 16);
  impl_->encode_into(st, text, out);
  return out;
}

std::vector<int> BpeTokenizer::encode_allow_special(std::string_view text) const {
  State& st = impl_->local_state();
  std::vector<int> out;
  // Text on either side of a special token is encoded on its own, as tiktoken does.
  size_t start = 0;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (!impl_->special_first[uint8_t(text[pos])]) continue;
    for (const auto& [literal, id] : impl_->specials) {
      if (text.compare(pos, literal.size(), literal) != 0) continue;
      impl_->encode_into(st, text.substr(start, pos - start), out);
      out.push_back(id);
      start = pos + literal.size();
      pos = start - 1;
      break;
    }
  }
  impl_->encode_into(st, text.substr(start), out);
  return out;
}

std::vector<std::vector<int>> BpeTokenizer::encode_batch(const std::vector<std::string_view>& docs) const {
  std::vector<std::vector<int>> out(docs.size());
  std::exception_ptr error;
#pragma omp parallel
  {
    try {
      State& st = impl_->local_state();  // per thread: no locking
#pragma omp for schedule(dynamic, 1)
      for (int64_t d = 0; d < int64_t(docs.size()); ++d) {
        out[size_t(d)].reserve(docs[size_t(d)].size() / 4 + 16);
        impl_->encode_into(st, docs[size_t(d)], out[size_t(d)]);
      }
    } catch (...) {  // an exception must not leave an OpenMP region
#pragma omp critical(odyssey_bpe_encode_batch)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int>& ids) const {
  const auto& bytes = impl_->token_bytes;
  size_t total = 0;
  for (int id : ids) {
    ODY_CHECK(id >= 0 && size_t(id) < bytes.size() && impl_->is_token[size_t(id)],
              "{} tokenizer: token id {} is not a token (ids are 0..{})", impl_->name, id, bytes.size() - 1);
    total += bytes[size_t(id)].size();
  }
  std::string out;
  out.reserve(total);
  for (int id : ids) out += bytes[size_t(id)];
  return out;
}

std::string BpeTokenizer::decode_one(int id) const {
  return decode({id});
}

}  // namespace odyssey
