#include "odyssey/data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace odyssey {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

// Unicode White_Space, which is what `\s` means to tiktoken's regex engine. PCRE2's own \s differs
// (it adds U+180E), so the class is spelled out.
constexpr std::string_view kSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string pretokenize_pattern() {
  std::string s(kSpace);
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + s + "\\p{L}\\p{N}]+|[" + s + "]+(?![^" + s +
         "])|[" + s + "]+";
}

// GPT-2 writes token bytes as printable characters: printable Latin-1 bytes stand for themselves, the
// other 68 bytes become U+0100.. in byte order. Returns code point -> byte (-1 when not in the alphabet).
std::array<int, 324> unicode_to_byte() {
  std::array<int, 324> inv;
  inv.fill(-1);
  int shifted = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    inv[printable ? b : 256 + shifted++] = b;
  }
  return inv;
}

// The bytes a token string of encoder.json / vocab.bpe stands for, or false when it has a character
// outside GPT-2's byte alphabet (or is not UTF-8).
bool unmap_token(std::string_view s, const std::array<int, 324>& inv, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    auto c = uint8_t(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if (c >= 0xC2 && c < 0xE0 && i + 1 < s.size() && (uint8_t(s[i + 1]) & 0xC0) == 0x80) {
      cp = (uint32_t(c & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // the alphabet ends at U+0143, so longer sequences cannot be in it
    }
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out.push_back(char(inv[cp]));
  }
  return !out.empty();
}

std::string read_vocab_file(const std::string& path) {
  std::error_code ec;
  ODY_CHECK(std::filesystem::is_regular_file(path, ec),
            "{}: no such file (scripts/fetch_gpt2_vocab.sh fetches it)", path);
  return read_text_file(path);
}

struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// (left id, right id) -> (rank, merged id), open addressing: probed once per candidate pair, the hot
// lookup of the merge loop.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int rank = 0;
    int id = 0;
  };

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    shift_ = 60;
    while (cap < 2 * n) cap *= 2, --shift_;
    slots_.resize(cap);
    mask_ = cap - 1;
  }
  // False when the pair is already there.
  bool insert(int left, int right, int rank, int id) {
    uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return false;
      if (slots_[i].key == kEmpty) {
        slots_[i] = {k, rank, id};
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
    ODY_CHECK(match != nullptr, "gpt2 tokenizer: out of memory for regex match data");
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

struct Gpt2Tokenizer::Impl {
  std::vector<std::string> token_bytes;  // id -> bytes
  std::array<int, 256> byte_id{};        // single byte -> id
  std::unique_ptr<MergeTable> merges;
  int eot = -1;
  pcre2_code* regex = nullptr;
  const uint64_t instance = next_instance.fetch_add(1);  // tells thread-local scratch whose it is

  ~Impl() { pcre2_code_free(regex); }

  State& local_state() const;

  void load(const std::string& encoder_path, const std::string& vocab_path);
  void compile_regex();
  void encode_into(State& st, std::string_view text, std::vector<int>& out) const;
  void encode_piece(State& st, std::string_view piece, std::vector<int>& out) const;
  void bpe(State& st, std::string_view piece, std::vector<int>& out) const;
};

void Gpt2Tokenizer::Impl::load(const std::string& encoder_path, const std::string& vocab_path) {
  const auto inv = unicode_to_byte();
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_vocab_file(encoder_path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", encoder_path, e.what());
  }
  ODY_CHECK(encoder.is_object() && !encoder.empty(),
            "{}: expected a JSON object mapping token strings to ids", encoder_path);
  const size_t n = encoder.size();
  token_bytes.assign(n, {});
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int, SvHash, std::equal_to<>> id_of;  // bytes -> id, eot excluded
  std::string bytes;
  for (const auto& [name, value] : encoder.items()) {
    ODY_CHECK(value.is_number_integer(), "{}: the id of token {} is not an integer", encoder_path,
              nlohmann::json(name).dump());
    const int64_t id = value.get<int64_t>();
    ODY_CHECK(id >= 0 && id < int64_t(n), "{}: id {} of token {} is outside 0..{} (ids must be dense)",
              encoder_path, id, nlohmann::json(name).dump(), n - 1);
    ODY_CHECK(!seen[size_t(id)], "{}: id {} is used twice", encoder_path, id);
    seen[size_t(id)] = true;
    if (name == kEndOfText) {
      eot = int(id);
      token_bytes[size_t(id)] = name;
      continue;
    }
    ODY_CHECK(unmap_token(name, inv, bytes), "{}: token {} has a character outside GPT-2's byte alphabet",
              encoder_path, nlohmann::json(name).dump());
    token_bytes[size_t(id)] = bytes;
    id_of.emplace(bytes, int(id));
  }
  ODY_CHECK(eot >= 0, "{}: no {} token", encoder_path, kEndOfText);
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    auto it = id_of.find(std::string_view(&byte, 1));
    ODY_CHECK(it != id_of.end(), "{}: no token for the single byte 0x{:02x}", encoder_path, b);
    byte_id[size_t(b)] = it->second;
  }

  const std::string text = read_vocab_file(vocab_path);
  std::vector<std::pair<std::string_view, size_t>> lines;  // (line, 1-based number)
  for (size_t pos = 0, number = 1; pos < text.size(); ++number) {
    size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    if (line.empty() || (number == 1 && line.starts_with("#version"))) continue;
    lines.emplace_back(line, number);
  }
  ODY_CHECK(!lines.empty(), "{}: no merges", vocab_path);
  merges = std::make_unique<MergeTable>(lines.size());
  std::string left, right;
  for (size_t rank = 0; rank < lines.size(); ++rank) {
    auto [line, number] = lines[rank];
    size_t space = line.find(' ');
    ODY_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string_view::npos,
              "{}:{}: expected two tokens separated by one space, got \"{}\"", vocab_path, number, line);
    std::string_view a = line.substr(0, space), b = line.substr(space + 1);
    ODY_CHECK(unmap_token(a, inv, left) && unmap_token(b, inv, right),
              "{}:{}: \"{}\" has a character outside GPT-2's byte alphabet", vocab_path, number, line);
    auto l = id_of.find(left), r = id_of.find(right), m = id_of.find(left + right);
    ODY_CHECK(l != id_of.end() && r != id_of.end() && m != id_of.end(),
              "{}:{}: merge \"{}\" uses or makes a token that is not in {}", vocab_path, number, line,
              encoder_path);
    ODY_CHECK(merges->insert(l->second, r->second, int(rank), m->second), "{}:{}: merge \"{}\" is repeated",
              vocab_path, number, line);
  }
}

void Gpt2Tokenizer::Impl::compile_regex() {
  const std::string pattern = pretokenize_pattern();
  int err = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 is never matched instead of failing the whole subject.
  regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (regex == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(err, message, sizeof(message));
    fail("gpt2 tokenizer: cannot compile the pre-tokenisation regex at {}: {}", offset,
         reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter still works
}

// One State per thread, kept across calls so that the piece cache stays warm however the text is cut
// into calls (encode per document from the caller's own threads, or encode_batch). Rebuilt when the
// thread turns to another tokenizer; its memory is bounded by PieceCache's limit.
State& Gpt2Tokenizer::Impl::local_state() const {
  thread_local uint64_t owner = 0;
  thread_local std::unique_ptr<State> state;
  if (owner != instance || state == nullptr) {
    state = std::make_unique<State>(regex);
    owner = instance;
  }
  return *state;
}

void Gpt2Tokenizer::Impl::encode_into(State& st, std::string_view text, std::vector<int>& out) const {
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
      fail("gpt2 tokenizer: regex match failed at byte {}: {}", pos, reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.match);
    ODY_CHECK(ov[1] > ov[0], "gpt2 tokenizer: empty regex match at byte {}", ov[0]);
    // Every valid character matches some alternative, so a skipped span is a run of invalid UTF-8.
    if (ov[0] > pos) encode_piece(st, text.substr(pos, ov[0] - pos), out);
    encode_piece(st, text.substr(ov[0], ov[1] - ov[0]), out);
    pos = ov[1];
  }
}

void Gpt2Tokenizer::Impl::encode_piece(State& st, std::string_view piece, std::vector<int>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[uint8_t(piece[0])]);
    return;
  }
  if (piece.size() > PieceCache::kMaxPiece) {
    bpe(st, piece, out);
    return;
  }
  const uint64_t hash = XXH3_64bits(piece.data(), piece.size());
  size_t count = 0;
  if (const int* ids = st.cache.find(piece, hash, count)) {
    out.insert(out.end(), ids, ids + count);
    return;
  }
  const size_t first = out.size();
  bpe(st, piece, out);
  st.cache.insert(piece, hash, out.data() + first, out.size() - first);
}

// Merges adjacent tokens of one piece, lowest rank first and leftmost first among equal ranks, as
// GPT-2's encoder.py and tiktoken do. The tokens form a linked list and candidate merges sit in a
// min-heap keyed (rank, position), so a piece of n bytes costs O(n log n), not O(n^2). A heap entry is
// stale when its left token has been absorbed or the pair at its position now has another rank: a
// token only grows, so the same rank at the same position means the same pair.
void Gpt2Tokenizer::Impl::bpe(State& st, std::string_view piece, std::vector<int>& out) const {
  const size_t n = piece.size();
  ODY_CHECK(n < (size_t(1) << 31), "gpt2 tokenizer: a single piece of {} bytes is too long", n);
  const auto end = uint32_t(n);
  st.ids.resize(n);
  st.next.resize(n);
  st.prev.resize(n);
  st.heap.clear();
  for (size_t i = 0; i < n; ++i) {
    st.ids[i] = byte_id[uint8_t(piece[i])];
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
    st.ids[i] = m->id;
    st.ids[j] = -1;
    st.next[i] = st.next[j];
    if (st.next[j] != end) st.prev[st.next[j]] = i;
    if (st.prev[i] != std::numeric_limits<uint32_t>::max()) push(st.prev[i]);
    push(i);
  }
  for (uint32_t i = 0; i != end; i = st.next[i]) out.push_back(st.ids[i]);
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path)
    : impl_(std::make_unique<Impl>()) {
  impl_->load(encoder_json_path, vocab_bpe_path);
  impl_->compile_regex();
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

int Gpt2Tokenizer::vocab_size() const {
  return int(impl_->token_bytes.size());
}
int Gpt2Tokenizer::eot_id() const {
  return impl_->eot;
}

std::vector<int> Gpt2Tokenizer::encode(std::string_view text) const {
  State& st = impl_->local_state();
  std::vector<int> out;
  out.reserve(text.size() / 4 + 16);
  impl_->encode_into(st, text, out);
  return out;
}

std::vector<int> Gpt2Tokenizer::encode_allow_special(std::string_view text) const {
  State& st = impl_->local_state();
  std::vector<int> out;
  // Text on either side of a special token is encoded on its own, as tiktoken does.
  for (size_t pos = 0;;) {
    size_t hit = text.find(kEndOfText, pos);
    impl_->encode_into(st, text.substr(pos, hit == std::string_view::npos ? hit : hit - pos), out);
    if (hit == std::string_view::npos) break;
    out.push_back(impl_->eot);
    pos = hit + kEndOfText.size();
  }
  return out;
}

std::vector<std::vector<int>> Gpt2Tokenizer::encode_batch(const std::vector<std::string_view>& docs) const {
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
#pragma omp critical(odyssey_gpt2_encode_batch)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<int>& ids) const {
  const auto& bytes = impl_->token_bytes;
  size_t total = 0;
  for (int id : ids) {
    ODY_CHECK(id >= 0 && size_t(id) < bytes.size(), "gpt2 tokenizer: token id {} is outside 0..{}", id,
              bytes.size() - 1);
    total += bytes[size_t(id)].size();
  }
  std::string out;
  out.reserve(total);
  for (int id : ids) out += bytes[size_t(id)];
  return out;
}

std::string Gpt2Tokenizer::decode_one(int id) const {
  return decode({id});
}

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& vocab_dir) {
  ODY_CHECK(!vocab_dir.empty(),
            "gpt2 tokenizer: no vocabulary directory given (it holds encoder.json and vocab.bpe; "
            "scripts/fetch_gpt2_vocab.sh fetches them)");
  namespace fs = std::filesystem;
  return std::make_unique<Gpt2Tokenizer>((fs::path(vocab_dir) / "encoder.json").string(),
                                         (fs::path(vocab_dir) / "vocab.bpe").string());
}

}  // namespace odyssey
