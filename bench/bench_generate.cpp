// Greedy generation speed with and without the KV cache (train/generate.h), printed as one JSON
// object on stdout. Random GPT-2 weights (init_parameters) and random prompt tokens: speed does not
// depend on what the weights are.
//
// Each path generates --tokens tokens after a --prompt token prompt through generate_tokens, the code
// `odyssey generate` runs. prefill = the pass over the prompt that yields the first new token;
// decode = the passes for the other tokens, one each (model time only, from GenerationStats).
// The KV path runs once untimed first (oneDNN primitive creation for its shapes); the recompute path
// has a new shape every token, so its primitive creation is part of what it costs. tokens_match
// says whether both paths produced the same tokens (they must: test_generate checks it on a small
// model).
//
// Usage: bench_generate [--n-layer 12] [--n-head 12] [--d-model 768] [--seq-len 1024] [--vocab 50257]
//                       [--prompt 256] [--tokens 64] [--threads 2] [--seed 1] [--recompute 1]
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/core/rng.h"
#include "odyssey/core/timer.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/kv_cache.h"
#include "odyssey/train/generate.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;
using nlohmann::json;

namespace {

struct Args {
  int n_layer = 12, n_head = 12, d_model = 768, seq_len = 1024, vocab = 50257;
  int prompt = 256, tokens = 64, threads = 2, seed = 1, recompute = 1;
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::map<std::string, int*> keys = {{"--n-layer", &a.n_layer}, {"--n-head", &a.n_head},
                                      {"--d-model", &a.d_model}, {"--seq-len", &a.seq_len},
                                      {"--vocab", &a.vocab},     {"--prompt", &a.prompt},
                                      {"--tokens", &a.tokens},   {"--threads", &a.threads},
                                      {"--seed", &a.seed},       {"--recompute", &a.recompute}};
  for (int i = 1; i < argc; ++i) {
    auto it = keys.find(argv[i]);
    if (it == keys.end() || i + 1 >= argc) {
      fmt::print(stderr, "bench_generate: unknown option or missing value: {}\n", argv[i]);
      std::exit(2);
    }
    *it->second = std::atoi(argv[++i]);
  }
  if (a.prompt < 1 || a.tokens < 2 || a.threads < 1) {
    fmt::print(stderr, "bench_generate: need prompt >= 1, tokens >= 2, threads >= 1\n");
    std::exit(2);
  }
  return a;
}

json run(GPT2& model, const std::vector<int>& prompt, SamplingOptions o, std::vector<int>* out) {
  GenerationStats st;
  Timer timer;
  *out = generate_tokens(model, prompt, o, {}, &st);
  double total = timer.seconds();
  return {{"prefill_ms", st.prefill_s * 1e3},
          {"prefill_tokens_per_s", st.prompt_tokens / st.prefill_s},
          {"decode_ms_per_token", st.decode_s * 1e3 / st.decode_steps},
          {"decode_tokens_per_s", st.decode_steps / st.decode_s},
          {"total_s", total},
          {"tokens_per_s", double(out->size()) / total},
          {"slides", st.slides}};
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse_args(argc, argv);
  omp_set_num_threads(a.threads);
  ModelConfig config;
  config.n_layer = a.n_layer;
  config.n_head = a.n_head;
  config.d_model = a.d_model;
  config.seq_len = a.seq_len;
  config.vocab_size = a.vocab;
  GPT2 model(config);
  init_parameters(model.params(), model.table(), config, uint64_t(a.seed));
  std::vector<int> prompt(size_t(a.prompt), 0);
  for (int i = 0; i < a.prompt; ++i)
    prompt[size_t(i)] = int(philox_uniform(uint64_t(a.seed), 1, uint64_t(i)) * float(a.vocab)) % a.vocab;

  SamplingOptions o;
  o.temperature = 0;  // greedy
  o.max_tokens = a.tokens;
  std::vector<int> kv_tokens, re_tokens;
  {  // warm-up: the KV path's GEMM shapes (M = prompt, M = 1)
    SamplingOptions w = o;
    w.max_tokens = 3;
    run(model, prompt, w, &kv_tokens);
  }
  json out = {{"host", odyssey::host_json()},
              {"model",
               {{"n_layer", a.n_layer},
                {"n_head", a.n_head},
                {"d_model", a.d_model},
                {"seq_len", a.seq_len},
                {"vocab", a.vocab},
                {"params", model.num_params()}}},
              {"prompt_tokens", a.prompt},
              {"new_tokens", a.tokens},
              {"threads", a.threads},
              {"kv_cache_bytes", KVCacheEngine(model).bytes()}};
  out["kv_cache"] = run(model, prompt, o, &kv_tokens);
  if (a.recompute) {
    o.use_kv_cache = false;
    out["recompute"] = run(model, prompt, o, &re_tokens);
    out["tokens_match"] = kv_tokens == re_tokens;
    out["decode_speedup"] = out["kv_cache"]["decode_tokens_per_s"].get<double>() /
                            out["recompute"]["decode_tokens_per_s"].get<double>();
  }
  fmt::print("{}\n", out.dump(2));
  return 0;
}
