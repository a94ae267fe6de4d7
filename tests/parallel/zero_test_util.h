// Shared by the multi-rank ZeRO tests: a tiny odd-sized GPT-2, deterministic synthetic rows, and the
// single-process run the parallel runs must reproduce, all through the trainer's train_step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/train_step.h"

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

// The rows of dp rank `rank`: micro-step m of step s takes rows [s G + (m D + rank) b, + b) of the
// global batch (the trainer's layout-independent order; G global batch, D ranks, b micro batch).
class SyntheticRows final : public MicroBatches {
 public:
  SyntheticRows(int vocab, int micro_batch, int rank, int ranks)
      : vocab_(vocab), micro_batch_(micro_batch), rank_(rank), ranks_(ranks) {}
  int rows() const override { return micro_batch_; }
  int local_len() const override { return kT; }
  const int* positions() const override { return nullptr; }
  void load(int64_t step, int micro, int* inputs, int* targets) override {
    const int64_t row0 = step * kGlobalBatch + int64_t(micro * ranks_ + rank_) * micro_batch_;
    for (int b = 0; b < micro_batch_; ++b)
      synthetic_row(uint64_t(row0 + b), vocab_, inputs + size_t(b) * kT, targets + size_t(b) * kT);
  }

 private:
  int vocab_, micro_batch_, rank_, ranks_;
};

inline const AdamW& optimizer() {
  static const AdamW adamw(adamw_config());
  return adamw;
}

// Loads the initial parameters into an engine (each rank keeps what its stage keeps).
inline void load_initial(Stage& model, ZeroEngine& engine) {
  std::vector<float> init(size_t(model.table().total()));
  init_parameters(init.data(), model.table(), model.config(), kSeed);
  engine.load(init.data());
}

// `steps` steps of the trainer's train_step over dp with an engine. Appends losses and norms to r.
inline void run_steps(Stage& model, ZeroEngine& engine, Communicator& dp, int steps, int micro_batch,
                      RunResult& r) {
  SyntheticRows rows(model.config().vocab_size, micro_batch, dp.rank(), dp.size());
  StepSettings settings;
  settings.micro_steps = kGlobalBatch / (micro_batch * dp.size());
  settings.dloss = 1.0f / float(kGlobalBatch * kT);
  settings.grad_clip = kClip;
  OneStagePipeline pipe(model, engine, settings.micro_steps);
  for (int s = 0; s < steps; ++s) {
    const StepResult step = train_step(pipe.step, rows, dp, settings, s, kLr);
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);
  }
}

// The same steps over dp with a ZeRO stage.
inline RunResult train_zero(Communicator& dp, const ZeroOptions& options, int steps, int micro_batch,
                            MemoryReport* memory = nullptr) {
  const ModelConfig c = tiny_config();
  GPT2 model(c, false);
  ZeroEngine engine(model, dp, options, optimizer());
  const size_t P = size_t(model.num_params());
  load_initial(model, engine);
  RunResult r;
  run_steps(model, engine, dp, steps, micro_batch, r);
  if (memory) *memory = engine.memory();
  r.params.assign(P, 0.0f);
  engine.gather_params_to_root(r.params.data());
  return r;
}

// The reference every layout must reproduce: the same train_step in one process (ZeRO stage 0 over a
// one-rank group), as `odyssey train` runs without MPI.
inline RunResult train_reference(int steps, int micro_batch) {
  SingleCommunicator single("reference");
  return train_zero(single, ZeroOptions{}, steps, micro_batch);
}

}  // namespace odyssey::testing_zero
