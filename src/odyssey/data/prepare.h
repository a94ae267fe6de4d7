// `odyssey prepare`: text files to llm.c token shards, split into train and val.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/data/token_shard.h"

namespace odyssey {

class Tokenizer;

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files (each file is one or more documents)
  std::string output_dir;
  std::string tokenizer = "bytes";
  std::string vocab_dir;       // for gpt2
  double val_fraction = 0.05;  // share of documents that go to val, chosen deterministically
  uint64_t shard_tokens = 100'000'000;
  bool progress = true;  // progress bar on stderr
};

struct PrepareSummary {
  uint64_t documents = 0, train_documents = 0, val_documents = 0;
  uint64_t bytes = 0, train_tokens = 0, val_tokens = 0;
  std::vector<std::string> train_files, val_files;
  TokenWidth width = TokenWidth::u16;  // uint32 when the tokenizer's vocabulary exceeds 65,536
};

// Tokenizes with the tokenizer named in `options`.
PrepareSummary prepare_shards(const PrepareOptions& options);
// Tokenizes with `tokenizer` (options.tokenizer and vocab_dir are ignored).
PrepareSummary prepare_shards(const PrepareOptions& options, const Tokenizer& tokenizer);

}  // namespace odyssey
