// Shared by the multi-rank ZeRO tests: a tiny odd-sized GPT-2, deterministic synthetic rows, and the
// plain single-process training loop the parallel runs must reproduce.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/zero.h"

namespace odyssey::testing_zero {

// 2 layers, 5 heads of 7, context 38, vocab 67: 34055 parameters (odd, so no rank count divides it;
// every unit is odd-sized too).
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 5;
  c.d_model = 35;
  c.seq_len = 38;
  c.vocab_size = 67;
  return c;
}

constexpr int kT = 37;           // tokens per row (shorter than the context, odd)
constexpr int kGlobalBatch = 8;  // rows per optimizer step
constexpr uint64_t kSeed = 1234;

// Row i of the run: T + 1 tokens from a fixed hash; inputs are the first T, targets the last T.
inline void synthetic_row(uint64_t i, int V, int* inputs, int* targets) {
  auto tok = [&](uint64_t t) {
    uint64_t h = (i * 0x9E3779B97F4A7C15ull) ^ (t * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return int(h % uint64_t(V));
  };
  for (int t = 0; t < kT; ++t) {
    inputs[t] = tok(uint64_t(t));
    targets[t] = tok(uint64_t(t) + 1);
  }
}

inline AdamWConfig adamw_config() {
  return AdamWConfig{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
}
constexpr float kLr = 6e-4f, kClip = 0.5f;

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<float> params;  // final, full (rank 0 only for parallel runs)
};

// The single-process loop of the trainer: accumulate micro-steps, global norm, clip, AdamW per tensor.
inline RunResult train_reference(int steps, int micro_batch) {
  const ModelConfig c = tiny_config();
  GPT2 model(c);
  const ParamTable& table = model.table();
  const size_t P = size_t(model.num_params());
  init_parameters(model.params(), table, c, kSeed);
  std::vector<float> m(P), v(P);
  std::vector<int> in(size_t(micro_batch) * kT), tg(size_t(micro_batch) * kT);
  const float dloss = 1.0f / float(kGlobalBatch * kT);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    model.zero_grads();
    double sum = 0;
    int64_t count = 0;
    for (int row0 = 0; row0 < kGlobalBatch; row0 += micro_batch) {
      for (int b = 0; b < micro_batch; ++b)
        synthetic_row(uint64_t(s * kGlobalBatch + row0 + b), c.vocab_size, &in[size_t(b) * kT],
                      &tg[size_t(b) * kT]);
      int64_t n = 0;
      sum += model.forward_backward(in.data(), tg.data(), nullptr, micro_batch, kT, dloss, &n);
      count += n;
    }
    const double norm = std::sqrt(sum_of_squares(model.grads(), P));
    const float scale = clip_scale(norm, kClip);
    for (const ParamInfo& p : table.tensors())
      adamw_update(model.params() + p.offset, model.grads() + p.offset, m.data() + p.offset,
                   v.data() + p.offset, size_t(p.numel), adamw_config(), kLr, s + 1, scale, p.weight_decay);
    r.losses.push_back(sum / double(count));
    r.norms.push_back(norm);
  }
  r.params.assign(model.params(), model.params() + P);
  return r;
}

struct LossSum {
  double sum;
  int64_t count;
};

// Loads the initial parameters into an engine (each rank keeps what its stage keeps).
inline void load_initial(GPT2& model, ZeroEngine& engine) {
  std::vector<float> init(size_t(model.num_params()));
  init_parameters(init.data(), model.table(), model.config(), kSeed);
  engine.load(init.data(), nullptr, nullptr);
}

// `steps` steps over dp with an engine: rank r takes rows [r*mb, (r+1)*mb) of each micro-step's
// mb*dp rows (the layout-independent global batch). Appends losses and norms to r.
inline void run_steps(GPT2& model, ZeroEngine& engine, Communicator& dp, int steps, int micro_batch,
                      RunResult& r) {
  const ModelConfig& c = model.config();
  const int ranks = dp.size(), rank = dp.rank();
  const int accum = kGlobalBatch / (micro_batch * ranks);
  std::vector<int> in(size_t(micro_batch) * kT), tg(size_t(micro_batch) * kT);
  const float dloss = 1.0f / float(kGlobalBatch * kT);
  for (int s = 0; s < steps; ++s) {
    engine.zero_grad();
    LossSum local{0, 0};
    for (int micro = 0; micro < accum; ++micro) {
      const int row0 = s * kGlobalBatch + (micro * ranks + rank) * micro_batch;
      for (int b = 0; b < micro_batch; ++b)
        synthetic_row(uint64_t(row0 + b), c.vocab_size, &in[size_t(b) * kT], &tg[size_t(b) * kT]);
      engine.begin_micro_step(micro == accum - 1);
      int64_t n = 0;
      local.sum += model.forward_backward(in.data(), tg.data(), nullptr, micro_batch, kT, dloss, &n);
      local.count += n;
      engine.end_micro_step();
    }
    std::vector<LossSum> all(static_cast<size_t>(ranks));
    dp.all_gather(&local, all.data(), sizeof(local), DType::u8);
    double sum = 0;
    int64_t count = 0;
    for (auto& a : all) sum += a.sum, count += a.count;
    const double norm = engine.grad_norm();
    engine.step(adamw_config(), kLr, s + 1, clip_scale(norm, kClip));
    r.losses.push_back(sum / double(count));
    r.norms.push_back(norm);
  }
}

// The same steps over dp with a ZeRO stage.
inline RunResult train_zero(Communicator& dp, const ZeroOptions& options, int steps, int micro_batch,
                            MemoryReport* memory = nullptr) {
  const ModelConfig c = tiny_config();
  GPT2 model(c, false);
  ZeroEngine engine(model, dp, options);
  const size_t P = size_t(model.num_params());
  load_initial(model, engine);
  RunResult r;
  run_steps(model, engine, dp, steps, micro_batch, r);
  if (memory) *memory = engine.memory();
  r.params.assign(P, 0.0f);
  engine.gather_to_root(r.params.data(), nullptr, nullptr, false);
  return r;
}

}  // namespace odyssey::testing_zero
