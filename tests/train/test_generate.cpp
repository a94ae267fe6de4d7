// Generation: the KV-cache engine against recomputing the whole window with the stage's forward, the
// context-full slide, and the sampler (temperature, top-k, top-p). The cache tests run for GPT-2 and
// for Llama (GQA 4 heads over 2, Llama-3 RoPE scaling: the cache keeps rotated keys at their positions).
//
// Model: random weights on an odd-sized model (2 layers, heads of 8, context 37, vocab 67). Every
// tensor, biases included, is drawn normal(0, 0.25) (norm weights 1 + normal(0, 0.1)), so that
// the logits are far from flat (greedy choices are not near-ties) and the cached k/v biases matter.
// Logit tolerance: max|kv - ref| / max|ref| <= 1e-5 (fp32, same kernels, different GEMM shapes).
//
// Sampler frequencies: N = 20000 draws with the fixed Philox stream generate_tokens uses; a count
// must be within 5 binomial standard deviations, sqrt(p (1 - p) / N) (<= 0.0036 here), of p.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/kv_cache.h"
#include "odyssey/train/generate.h"

using namespace odyssey;

namespace {

constexpr double kLogitTol = 1e-5;

ModelConfig tiny_config(const std::string& arch) {
  ModelConfig c;
  c.arch = parse_enum(kArchNames, arch, "model.arch");
  c.n_layer = 2;
  c.n_head = 5;
  c.d_model = 40;
  c.seq_len = 37;
  c.vocab_size = 67;
  if (arch == "llama") {
    c.n_head = 4, c.n_kv_head = 2, c.head_size = 8, c.d_ff = 56;
    c.rope_scaling = {RopeType::llama3, 8.0, 1.0, 4.0, 16};
  }
  return c;
}

std::unique_ptr<Stage> random_model(uint64_t seed, const std::string& arch = "gpt2") {
  const ModelConfig c = tiny_config(arch);
  auto model = architecture(c.arch).make_stage(c, StageRange{}, true, {});
  const auto& tensors = model->table().tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ParamInfo& p = tensors[t];
    float mean = p.init == ParamInfo::Init::ones ? 1.0f : 0.0f;
    float std = p.init == ParamInfo::Init::ones ? 0.1f : 0.25f;
    philox_fill_normal(model->params() + p.offset, size_t(p.numel), mean, std, seed, t);
  }
  return model;
}

std::vector<int> random_tokens(int n, int V, uint64_t seed) {
  std::vector<int> t(size_t(n), 0);
  for (int i = 0; i < n; ++i) t[size_t(i)] = int(philox_uniform(seed, 7, uint64_t(i)) * float(V)) % V;
  return t;
}

double rel_error(const float* a, const float* b, int n) {
  double diff = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// Logits [V] of the last token of `window` (positions 0..T-1) by a full forward.
std::vector<float> forward_last(Stage& model, const std::vector<int>& window) {
  const int T = int(window.size()), V = model.config().vocab_size;
  model.forward(window.data(), nullptr, nullptr, 1, T, nullptr);
  const float* last = model.logits().row(T - 1);
  return std::vector<float>(last, last + V);
}

int argmax(const float* x, int n) {
  return int(std::max_element(x, x + n) - x);
}

// Gap between the largest and second largest logit.
double top2_gap(const float* x, int n) {
  std::vector<float> v(x, x + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return double(v[0]) - double(v[1]);
}

// The KV-cache tests run once per architecture.
class KVCache : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Arch, KVCache, ::testing::Values("gpt2", "llama"));

}  // namespace

// (b) One batched prefill gives the last-position logits of forward() over the same tokens.
TEST_P(KVCache, PrefillMatchesForward) {
  auto model = random_model(11, GetParam());
  const int V = model->config().vocab_size, ctx = model->config().seq_len;
  KVCacheEngine engine(*model);
  for (int n : {1, 5, 13, ctx}) {
    auto prompt = random_tokens(n, V, uint64_t(n));
    const float* kv = engine.prefill(prompt);
    auto ref = forward_last(*model, prompt);
    EXPECT_LE(rel_error(kv, ref.data(), V), kLogitTol) << "prompt of " << n;
    EXPECT_EQ(engine.length(), n);
  }
  // A prompt longer than the context keeps its last ctx tokens.
  auto longer = random_tokens(ctx + 13, V, 99);
  const float* kv = engine.prefill(longer);
  auto ref = forward_last(*model, std::vector<int>(longer.end() - ctx, longer.end()));
  EXPECT_LE(rel_error(kv, ref.data(), V), kLogitTol);
  EXPECT_EQ(engine.length(), ctx);
}

// (a) Greedy decoding token by token with the cache equals recomputing the whole prefix, logits
// within 1e-5 at every step; generate_tokens gives the same tokens on both paths.
TEST_P(KVCache, GreedyMatchesRecompute) {
  auto model = random_model(3, GetParam());
  const int V = model->config().vocab_size;
  const auto prompt = random_tokens(5, V, 5);
  KVCacheEngine engine(*model);
  std::vector<int> seq = prompt, expected;
  const float* kv = engine.prefill(prompt);
  double worst = 0, min_gap = 1e30;
  for (int i = 0; i < 30; ++i) {
    auto ref = forward_last(*model, seq);
    double err = rel_error(kv, ref.data(), V);
    worst = std::max(worst, err);
    EXPECT_LE(err, kLogitTol) << "step " << i;
    min_gap = std::min(min_gap, top2_gap(ref.data(), V));
    int next = argmax(ref.data(), V);
    ASSERT_EQ(argmax(kv, V), next) << "step " << i;
    expected.push_back(next);
    seq.push_back(next);
    kv = engine.step(next);
  }
  EXPECT_EQ(engine.length(), 35);
  EXPECT_EQ(engine.slides(), 0);
  // The comparison means something only if greedy choices are not near-ties.
  EXPECT_GT(min_gap, 1e-3);
  std::printf("max relative logit error %.2e, smallest top-2 logit gap %.3f\n", worst, min_gap);

  SamplingOptions o;
  o.max_tokens = 30;
  o.temperature = 0;
  std::vector<int> streamed;
  GenerationStats st;
  auto with_cache = generate_tokens(
      *model, prompt, o, [&](int t) { streamed.push_back(t); }, &st);
  o.use_kv_cache = false;
  auto recomputed = generate_tokens(*model, prompt, o);
  EXPECT_EQ(with_cache, expected);
  EXPECT_EQ(recomputed, expected);
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(st.prompt_tokens, 5);
  EXPECT_EQ(st.decode_steps, 29);
}

// Sampling with temperature, top-k and top-p draws the same tokens on both paths (same seed).
TEST_P(KVCache, SampledMatchesRecompute) {
  auto model = random_model(4, GetParam());
  const auto prompt = random_tokens(6, model->config().vocab_size, 6);
  SamplingOptions o;
  o.max_tokens = 30;
  o.temperature = 0.9f;
  o.top_k = 20;
  o.top_p = 0.9f;
  o.seed = 1234;
  auto with_cache = generate_tokens(*model, prompt, o);
  o.use_kv_cache = false;
  EXPECT_EQ(generate_tokens(*model, prompt, o), with_cache);
  o.seed = 1235;  // the seed matters
  EXPECT_NE(generate_tokens(*model, prompt, o), with_cache);
}

// (d) Context full: appending to a full cache slides to the last ctx/2 tokens plus the new one,
// re-prefilled from position 0.
TEST_P(KVCache, ContextFullSlides) {
  auto model = random_model(5, GetParam());
  const int V = model->config().vocab_size, ctx = model->config().seq_len, keep = ctx / 2;
  KVCacheEngine engine(*model);
  auto seq = random_tokens(ctx, V, 17);
  engine.prefill(seq);
  ASSERT_EQ(engine.length(), ctx);
  const float* kv = engine.step(42);
  seq.push_back(42);
  EXPECT_EQ(engine.length(), keep + 1);
  EXPECT_EQ(engine.slides(), 1);
  std::vector<int> window(seq.end() - (keep + 1), seq.end());
  EXPECT_LE(rel_error(kv, forward_last(*model, window).data(), V), kLogitTol);
  // Decoding continues from the slid window as from a fresh prefill of it.
  kv = engine.step(7);
  window.push_back(7);
  EXPECT_LE(rel_error(kv, forward_last(*model, window).data(), V), kLogitTol);

  // Through generate_tokens: 5 prompt tokens + 80 new ones in a context of 37. The cache is full
  // after 32 steps; slides at steps 33, 52 and 71 (each leaves 19 tokens). Both paths agree.
  SamplingOptions o;
  o.max_tokens = 80;
  o.temperature = 0;
  const auto prompt = random_tokens(5, V, 23);
  GenerationStats st_kv, st_re;
  auto with_cache = generate_tokens(*model, prompt, o, {}, &st_kv);
  o.use_kv_cache = false;
  auto recomputed = generate_tokens(*model, prompt, o, {}, &st_re);
  EXPECT_EQ(with_cache.size(), 80u);
  EXPECT_EQ(with_cache, recomputed);
  EXPECT_EQ(st_kv.slides, 3);
  EXPECT_EQ(st_re.slides, 3);
}

TEST_P(KVCache, BadInput) {
  auto model = random_model(6, GetParam());
  KVCacheEngine engine(*model);
  EXPECT_THROW(engine.prefill(std::vector<int>{}), Error);
  EXPECT_THROW(engine.prefill(std::vector<int>{1, 67}), Error);
  engine.prefill(std::vector<int>{1, 2});
  EXPECT_THROW(engine.step(-1), Error);
  SamplingOptions o;
  EXPECT_THROW(generate_tokens(*model, {}, o), Error);
  o.top_p = 0;
  EXPECT_THROW(generate_tokens(*model, {1}, o), Error);
}

TEST(Generate, StopTokenAndZeroTokens) {
  auto model = random_model(7);
  const auto prompt = random_tokens(4, model->config().vocab_size, 4);
  SamplingOptions o;
  o.max_tokens = 20;
  o.temperature = 0;
  auto all = generate_tokens(*model, prompt, o);
  o.stop_token = all[3];
  auto stopped = generate_tokens(*model, prompt, o);
  // Stops after the first occurrence of the stop token, which it includes.
  size_t first = size_t(std::find(all.begin(), all.end(), all[3]) - all.begin());
  EXPECT_EQ(stopped, std::vector<int>(all.begin(), all.begin() + long(first) + 1));
  o.max_tokens = 0;
  EXPECT_TRUE(generate_tokens(*model, prompt, o).empty());
}

// --- sample_token ------------------------------------------------------------------------------

namespace {

// Frequencies of each token over N draws u_i = philox_uniform(seed, 0, i).
std::vector<double> frequencies(const std::vector<float>& logits, float temperature, int top_k, float top_p,
                                int N = 20000) {
  const int V = int(logits.size());
  std::vector<int> count(size_t(V), 0);
  for (int i = 0; i < N; ++i)
    ++count[size_t(
        sample_token(logits.data(), V, temperature, top_k, top_p, philox_uniform(42, 0, uint64_t(i))))];
  std::vector<double> f;
  for (int c : count) f.push_back(double(c) / N);
  return f;
}

double five_sigma(double p, int N = 20000) {
  return 5 * std::sqrt(p * (1 - p) / N);
}

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> l;
  for (double x : p) l.push_back(float(std::log(x)));
  return l;
}

}  // namespace

TEST(SampleToken, GreedyTopK1AndTinyTopPPickTheArgmax) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};  // tie at 1 and 3: lower id
  for (float u : {0.0f, 0.3f, 0.7f, 0.99999994f}) {
    EXPECT_EQ(sample_token(logits.data(), 5, 0.0f, 0, 1.0f, u), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0f, 1, 1.0f, u), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 1.0f, 0, 1e-6f, u), 1);
    EXPECT_EQ(sample_token(logits.data(), 5, 5.0f, 0, 1e-6f, u), 1);
  }
}

TEST(SampleToken, TwoTokenFrequenciesMatchProbabilities) {
  const auto logits = log_probs({0.3, 0.7});
  auto f = frequencies(logits, 1.0f, 0, 1.0f);
  EXPECT_NEAR(f[0], 0.3, five_sigma(0.3));
  // Temperature 2: p proportional to sqrt(p).
  const double p0 = std::sqrt(0.3) / (std::sqrt(0.3) + std::sqrt(0.7));
  f = frequencies(logits, 2.0f, 0, 1.0f);
  EXPECT_NEAR(f[0], p0, five_sigma(p0));
  // Temperature 0.5: p proportional to p^2.
  const double q0 = 0.09 / (0.09 + 0.49);
  f = frequencies(logits, 0.5f, 0, 1.0f);
  EXPECT_NEAR(f[0], q0, five_sigma(q0));
}

TEST(SampleToken, TopKAndTopPCutAndRenormalise) {
  // p = {0.2, 0.5, 0.3}: by descending probability ids 1, 2, 0.
  const auto logits = log_probs({0.2, 0.5, 0.3});
  // top_k = 2 keeps {1, 2}: 0.625 / 0.375.
  auto f = frequencies(logits, 1.0f, 2, 1.0f);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 0.625, five_sigma(0.625));
  // top_p = 0.75: 0.5 < 0.75 <= 0.8, so {1, 2} again.
  f = frequencies(logits, 1.0f, 0, 0.75f);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_NEAR(f[1], 0.625, five_sigma(0.625));
  // top_p = 0.45 keeps only the most likely.
  f = frequencies(logits, 1.0f, 0, 0.45f);
  EXPECT_EQ(f[1], 1.0);
  // top_p = 0.9 keeps all three.
  f = frequencies(logits, 1.0f, 0, 0.9f);
  EXPECT_NEAR(f[0], 0.2, five_sigma(0.2));

  // top_p applies after top_k: p = {0.4, 0.3, 0.2, 0.1}, top_k = 3 renormalises to {4, 3, 2} / 9;
  // top_p = 0.7 then keeps {0, 1} (4/9 < 0.7 <= 7/9): 4/7 and 3/7.
  const auto four = log_probs({0.4, 0.3, 0.2, 0.1});
  f = frequencies(four, 1.0f, 3, 0.7f);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 4.0 / 7, five_sigma(4.0 / 7));
  // Temperature applies before top_p: at temperature 0.5, p ~ {16, 9, 4, 1} / 30 and top_p = 0.7
  // keeps {0, 1} (16/30 < 0.7 <= 25/30); at temperature 1 it would keep three.
  f = frequencies(four, 0.5f, 0, 0.7f);
  EXPECT_EQ(f[2] + f[3], 0.0);
  EXPECT_NEAR(f[0], 16.0 / 25, five_sigma(16.0 / 25));
}

TEST(SampleToken, NucleusOverALargeVocabulary) {
  // 50257 tokens: 100 likely ones (e^10 each against 1) hold ~98% of the mass, so top_p = 0.5 keeps
  // about the 52 largest of them (logits rise with i). The incremental sort must find them.
  const int V = 50257;
  std::vector<float> logits(size_t(V), 0.0f);
  for (int i = 0; i < 100; ++i) logits[size_t(i * 457)] = 10.0f + 0.01f * float(i);
  for (int i = 0; i < 2000; ++i) {
    int t = sample_token(logits.data(), V, 1.0f, 0, 0.5f, philox_uniform(9, 0, uint64_t(i)));
    ASSERT_EQ(t % 457, 0);
    ASSERT_GE(t / 457, 40);
  }
}
