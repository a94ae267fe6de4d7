#include "odyssey/data/prepare.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/data/token_shard.h"
#include "odyssey/data/tokenizer.h"

namespace fs = std::filesystem;

namespace odyssey {

namespace {

std::string shard_name(const std::string& split, size_t index) {
  return fmt::format("{}_{:06d}.bin", split, index);
}

// "train_000012.bin" and the like: the files a previous run may have left in the output directory.
bool is_shard_name(const std::string& name) {
  for (const char* split : {"train_", "val_"}) {
    const std::string prefix = split;
    if (name.size() != prefix.size() + 6 + 4 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.compare(name.size() - 4, 4, ".bin") != 0) continue;
    return std::all_of(name.begin() + long(prefix.size()), name.end() - 4,
                       [](char c) { return c >= '0' && c <= '9'; });
  }
  return false;
}

// Accumulates one split's token stream and cuts it into shards of `shard_tokens` in the staging dir.
class ShardWriter {
 public:
  ShardWriter(std::string split, std::string dir, uint64_t shard_tokens, TokenWidth width)
      : split_(std::move(split)), dir_(std::move(dir)), shard_tokens_(shard_tokens), width_(width) {}

  void append(const std::vector<uint32_t>& tokens) {
    size_t i = 0;
    while (i < tokens.size()) {
      const size_t n = std::min<size_t>(tokens.size() - i, shard_tokens_ - buffer_.size());
      buffer_.insert(buffer_.end(), tokens.begin() + long(i), tokens.begin() + long(i + n));
      i += n;
      if (buffer_.size() == shard_tokens_) flush();
    }
    total_ += tokens.size();
  }

  void finish() {
    if (!buffer_.empty()) flush();
  }

  uint64_t total() const { return total_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  void flush() {
    names_.push_back(shard_name(split_, names_.size()));
    write_token_shard(dir_ + "/" + names_.back(), buffer_, width_);
    buffer_.clear();
  }

  std::string split_, dir_;
  uint64_t shard_tokens_;
  TokenWidth width_;
  std::vector<uint32_t> buffer_;
  std::vector<std::string> names_;
  uint64_t total_ = 0;
};

// Removes the staging directory unless the run committed it (so a failure leaves no partial shards).
struct StagingDir {
  std::string path;
  ~StagingDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

class Progress {
 public:
  Progress(bool enabled, uint64_t total) : enabled_(enabled), total_(total) {}

  void update(uint64_t done, uint64_t bytes, bool last = false) {
    if (!enabled_ || (!last && since_draw_.seconds() < 0.1)) return;
    since_draw_.reset();
    const int width = 30;
    const int filled = total_ ? int(double(done) / double(total_) * width) : width;
    const double mb = double(bytes) / 1e6;
    const double seconds = std::max(clock_.seconds(), 1e-9);
    fmt::print(stderr, "\rprepare [{:=<{}}{: <{}}] {}/{} documents  {:.1f} MB  {:.1f} MB/s", "", filled, "",
               width - filled, done, total_, mb, mb / seconds);
    if (last) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  uint64_t total_;
  Timer clock_, since_draw_;
};

struct Document {
  std::string path;
  uint64_t bytes = 0;
  bool val = false;
};

}  // namespace

PrepareSummary prepare_shards(const PrepareOptions& options) {
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(options.tokenizer, options.vocab_dir);
  return prepare_shards(options, *tokenizer);
}

PrepareSummary prepare_shards(const PrepareOptions& options, const Tokenizer& tokenizer) {
  ODY_CHECK(!options.inputs.empty(), "prepare: no input files");
  ODY_CHECK(!options.output_dir.empty(), "prepare: no output directory");
  ODY_CHECK(options.val_fraction >= 0.0 && options.val_fraction <= 0.5,
            "prepare: val_fraction {} is out of range [0, 0.5]", options.val_fraction);
  ODY_CHECK(
      options.shard_tokens >= 1 && options.shard_tokens <= uint64_t(std::numeric_limits<int32_t>::max()),
      "prepare: shard_tokens {} is out of range [1, 2^31-1] (llm.c shards count tokens in int32)",
      options.shard_tokens);

  // Each input file is one document, taken in sorted path order so the split does not depend on the
  // order of the command line. Every file is checked before any work is done.
  std::vector<std::string> paths = options.inputs;
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  std::vector<Document> docs;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    ODY_CHECK(fs::exists(status), "prepare: input file {} not found", path);
    ODY_CHECK(fs::is_regular_file(status), "prepare: input {} is not a regular file", path);
    const uint64_t bytes = fs::file_size(path, ec);
    ODY_CHECK(!ec, "prepare: cannot read the size of input file {}: {}", path, ec.message());
    // An empty file holds no document; skipping it (rather than failing) lets globs over a corpus pass
    // through, and the warning keeps it visible.
    if (bytes == 0) {
      log_info("prepare: warning: skipping empty input file {}", path);
      continue;
    }
    docs.push_back({path, bytes, false});
  }
  ODY_CHECK(!docs.empty(), "prepare: all {} input files are empty", paths.size());

  // Document-level split: every k-th document (k = round(1 / val_fraction)) goes to val, and at least
  // one (the last) when there are two or more documents.
  PrepareSummary summary;
  summary.documents = docs.size();
  if (options.val_fraction > 0) {
    const uint64_t k = std::max<uint64_t>(2, uint64_t(std::llround(1.0 / options.val_fraction)));
    for (size_t j = 0; j < docs.size(); ++j) docs[j].val = (j + 1) % k == 0;
    if (docs.size() >= 2 && std::none_of(docs.begin(), docs.end(), [](const Document& d) { return d.val; })) {
      docs.back().val = true;
    }
  }

  // Shards are written to a staging directory and moved into place only when every one is complete.
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  ODY_CHECK(!ec, "prepare: cannot create output directory {}: {}", options.output_dir, ec.message());
  StagingDir staging{fmt::format("{}/.prepare.tmp.{}", options.output_dir, getpid())};
  fs::remove_all(staging.path, ec);
  fs::create_directory(staging.path, ec);
  ODY_CHECK(!ec, "prepare: cannot create staging directory {}: {}", staging.path, ec.message());

  // uint16 shards while the vocabulary fits them (byte-identical to llm.c's GPT-2 data), else uint32.
  const TokenWidth width = token_width_for_vocab(tokenizer.vocab_size());
  summary.width = width;
  ShardWriter train("train", staging.path, options.shard_tokens, width);
  ShardWriter val("val", staging.path, options.shard_tokens, width);

  // With an end-of-text token every document is preceded by it (llm.c's convention: it also marks the
  // start of the first document); without one, documents of a split are separated by a single "\n".
  const int eot = tokenizer.eot_id();
  const std::vector<int> newline = tokenizer.encode("\n");
  bool train_started = false, val_started = false;

  Progress progress(options.progress, docs.size());
  // Documents are read and tokenized in parallel batches (BPE is the slow part), then appended in order.
  constexpr uint64_t kBatchBytes = 64ull << 20;
  constexpr size_t kBatchDocs = 256;
  size_t next = 0;
  while (next < docs.size()) {
    size_t end = next;
    uint64_t batch_bytes = 0;
    while (end < docs.size() && end - next < kBatchDocs && (end == next || batch_bytes < kBatchBytes)) {
      batch_bytes += docs[end++].bytes;
    }
    const size_t count = end - next;
    std::vector<std::vector<int>> ids(count);
    std::vector<uint64_t> read_bytes(count, 0);
    std::vector<std::exception_ptr> errors(count);
#pragma omp parallel for schedule(dynamic, 1)
    for (long b = 0; b < long(count); ++b) {
      // Exceptions must not leave an OpenMP region: keep them and rethrow in document order.
      try {
        const std::string text = read_text_file(docs[next + size_t(b)].path);
        read_bytes[size_t(b)] = text.size();
        ids[size_t(b)] = tokenizer.encode(text);
      } catch (...) {
        errors[size_t(b)] = std::current_exception();
      }
    }
    for (size_t b = 0; b < count; ++b) {
      const Document& doc = docs[next + b];
      if (errors[b]) std::rethrow_exception(errors[b]);
      ShardWriter& writer = doc.val ? val : train;
      bool& started = doc.val ? val_started : train_started;
      std::vector<int> sequence;
      sequence.reserve(ids[b].size() + 1);
      if (eot >= 0) {
        sequence.push_back(eot);
      } else if (started) {
        sequence.insert(sequence.end(), newline.begin(), newline.end());
      }
      started = true;
      sequence.insert(sequence.end(), ids[b].begin(), ids[b].end());
      std::vector<uint32_t> tokens(sequence.size());
      for (size_t i = 0; i < sequence.size(); ++i) {
        ODY_CHECK(sequence[i] >= 0 && sequence[i] < tokenizer.vocab_size(),
                  "prepare: tokenizer {} produced id {} for {}, outside its vocabulary of {}",
                  tokenizer.name(), sequence[i], doc.path, tokenizer.vocab_size());
        tokens[i] = uint32_t(sequence[i]);
      }
      writer.append(tokens);
      ids[b] = {};
      summary.bytes += read_bytes[b];
      ++(doc.val ? summary.val_documents : summary.train_documents);
      progress.update(next + b + 1, summary.bytes);
    }
    next = end;
  }
  train.finish();
  val.finish();
  progress.update(docs.size(), summary.bytes, true);
  summary.train_tokens = train.total();
  summary.val_tokens = val.total();

  // Commit: move the shards into place, then remove shards of an earlier run that this one did not
  // write (a glob over the directory would otherwise pick them up).
  std::set<std::string> written;
  for (const ShardWriter* writer : {&train, &val}) {
    for (const std::string& name : writer->names()) {
      const std::string final_path = options.output_dir + "/" + name;
      fs::rename(staging.path + "/" + name, final_path, ec);
      ODY_CHECK(!ec, "prepare: cannot move {} into {}: {}", name, options.output_dir, ec.message());
      written.insert(name);
      (writer == &train ? summary.train_files : summary.val_files).push_back(final_path);
    }
  }
  for (const auto& entry : fs::directory_iterator(options.output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_shard_name(name) && !written.count(name)) {
      log_info("prepare: removing stale shard {} from an earlier run", entry.path().string());
      fs::remove(entry.path(), ec);
    }
  }
  fsync_dir(options.output_dir);
  return summary;
}

}  // namespace odyssey
