// BPE tokenizer throughput (gpt2, cl100k_base, o200k_base, llama3) on the Brown corpus, printed as one
// JSON object on stdout: encode MB/s
// (input bytes per second) with 1 and 2 OpenMP threads over documents (one document per corpus
// file), cold (empty per-thread piece caches, as for a new corpus) and warm, the 2-thread speedup,
// MB per CPU-second with one thread (which a busy machine disturbs less than wall time), decode MB/s
// and the vocabulary load time. Best of `repeats` runs.
// Usage: bench_tokenizer [name] [corpus_dir] [repeats]; defaults gpt2 (its files in
// $ODYSSEY_CACHE/<name>) and $ODYSSEY_CACHE/brown/text ($ODYSSEY_CACHE defaults to ./cache).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/core/timer.h"
#include "odyssey/data/bpe_tokenizer.h"
#include "odyssey/data/tokenizer.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;
namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  const char* env = std::getenv("ODYSSEY_CACHE");
  const fs::path cache = env != nullptr && *env != '\0' ? fs::path(env) : fs::path("cache");
  const std::string name = argc > 1 ? argv[1] : "gpt2";
  ODY_CHECK(name != "bytes" && is_tokenizer_name(name), "unknown BPE tokenizer '{}' ({})", name,
            kTokenizerNames);
  const fs::path corpus = argc > 2 ? fs::path(argv[2]) : cache / "brown" / "text";
  const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;

  std::vector<std::string> texts;
  if (fs::is_directory(corpus)) {
    for (const auto& e : fs::directory_iterator(corpus)) {
      if (e.path().extension() == ".txt") texts.push_back(read_text_file(e.path().string()));
    }
  }
  ODY_CHECK(!texts.empty(), "no *.txt files in {} (run scripts/fetch_brown.sh)", corpus.string());
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  const double mb = double(bytes) / 1e6;

  // Every tokenizer but bytes is a BpeTokenizer (its batch encoder runs documents on threads).
  auto load = [&] {
    std::unique_ptr<Tokenizer> t = make_tokenizer(name);
    return std::unique_ptr<BpeTokenizer>(static_cast<BpeTokenizer*>(t.release()));
  };
  Timer load_timer;
  auto tok = load();
  const double load_s = load_timer.seconds();

  // cold: a fresh tokenizer per run, so every thread starts with an empty piece cache (a new corpus);
  // warm: the same text again, most pieces served from the per-thread caches.
  std::vector<std::vector<int>> ids;
  double cold_mb_s[3] = {0, 0, 0}, warm_mb_s[3] = {0, 0, 0}, cold_cpu_mb_s = 0;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int r = 0; r < repeats; ++r) {
      tok = load();
      std::clock_t c0 = std::clock();
      Timer t;
      ids = tok->encode_batch(docs);
      cold_mb_s[threads] = std::max(cold_mb_s[threads], mb / t.seconds());
      // Per CPU-second with one thread: steadier than wall time on a shared machine.
      if (threads == 1)
        cold_cpu_mb_s = std::max(cold_cpu_mb_s, mb * CLOCKS_PER_SEC / double(std::clock() - c0));
      t.reset();
      ids = tok->encode_batch(docs);
      warm_mb_s[threads] = std::max(warm_mb_s[threads], mb / t.seconds());
    }
  }
  size_t tokens = 0;
  for (const auto& d : ids) tokens += d.size();
  double decode_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Timer t;
    for (size_t i = 0; i < ids.size(); ++i)
      ODY_CHECK(tok->decode(ids[i]).size() == texts[i].size(), "decode mismatch");
    decode_s = std::min(decode_s, t.seconds());
  }

  fmt::print(
      "{{\"host\": {}, \"tokenizer\": \"{}\", \"corpus\": \"{}\", \"files\": {}, \"bytes\": {}, \"tokens\": "
      "{}, "
      "\"bytes_per_token\": {:.4f}, "
      "\"load_s\": {:.3f}, \"encode_mb_s_cold\": {{\"1\": {:.2f}, \"2\": {:.2f}}}, "
      "\"encode_mb_s_warm\": {{\"1\": {:.2f}, \"2\": {:.2f}}}, \"speedup_2_threads_cold\": {:.2f}, "
      "\"encode_mb_per_cpu_s_cold_1_thread\": {:.2f}, \"decode_mb_s\": {:.1f}}}\n",
      odyssey::host_json().dump(), name, corpus.string(), texts.size(), bytes, tokens,
      double(bytes) / double(tokens), load_s, cold_mb_s[1], cold_mb_s[2], warm_mb_s[1], warm_mb_s[2],
      cold_mb_s[2] / cold_mb_s[1], cold_cpu_mb_s, mb / decode_s);
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "bench_tokenizer: {}\n", e.what());
  return 1;
}
