#include "odyssey/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/core/error.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/optim/schedule.h"
#include "odyssey/train/metrics.h"

namespace odyssey {

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

double evaluate_loss(GPT2& model, const TokenDataset& data, int64_t max_rows, int micro_batch) {
  const int T = data.seq_len();
  int64_t rows = int64_t(data.rows_per_epoch());
  if (max_rows > 0) rows = std::min(rows, max_rows);
  std::vector<int> inputs(size_t(micro_batch) * T), targets(size_t(micro_batch) * T);
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r += micro_batch) {
    int B = int(std::min<int64_t>(micro_batch, rows - r));
    for (int b = 0; b < B; ++b)
      data.get_row(uint64_t(r + b), &inputs[size_t(b) * T], &targets[size_t(b) * T]);
    int64_t n = 0;
    sum += model.forward(inputs.data(), targets.data(), nullptr, B, T, &n);
    count += n;
  }
  return count > 0 ? sum / double(count) : 0.0;
}

namespace {

nlohmann::json run_config_json(const RunConfig& c) {
  return {{"data",
           {{"train", c.data.train},
            {"val", c.data.val},
            {"shuffle", c.data.shuffle},
            {"tokenizer", c.data.tokenizer},
            {"vocab_dir", c.data.vocab_dir}}},
          {"train",
           {{"steps", c.train.steps},
            {"global_batch", c.train.global_batch},
            {"micro_batch", c.train.micro_batch},
            {"seq_len", c.seq_len()},
            {"lr", c.train.lr},
            {"min_lr", c.train.min_lr},
            {"warmup_steps", c.train.warmup_steps},
            {"schedule", c.train.schedule},
            {"weight_decay", c.train.weight_decay},
            {"beta1", c.train.beta1},
            {"beta2", c.train.beta2},
            {"eps", c.train.eps},
            {"grad_clip", c.train.grad_clip},
            {"seed", c.train.seed}}}};
}

// Refuses to resume a checkpoint whose model differs from the configured one, naming the key.
void check_same_model(const ModelConfig& want, const ModelConfig& have, const std::string& dir) {
  auto check = [&](const char* key, auto a, auto b) {
    ODY_CHECK(a == b, "checkpoint {} has {}={}, the config says {}", dir, key, b, a);
  };
  check("model.arch", want.arch, have.arch);
  check("model.n_layer", want.n_layer, have.n_layer);
  check("model.n_head", want.n_head, have.n_head);
  check("model.d_model", want.d_model, have.d_model);
  check("model.seq_len", want.seq_len, have.seq_len);
  check("model.vocab_size", want.vocab_size, have.vocab_size);
}

}  // namespace

TrainResult run_training(const RunConfig& config) {
  config.validate(1);
  set_threads(config.train.threads);
  const TrainConfig& tc = config.train;
  const int T = config.seq_len();
  const int accum = tc.global_batch / tc.micro_batch;

  GPT2 model(config.model);
  const ParamTable& table = model.table();
  const size_t P = size_t(model.num_params());
  FloatBuffer m(P), v(P);

  // Data first: a bad shard is refused before anything is written.
  std::unique_ptr<TokenDataset> train_data, val_data;
  if (tc.steps > 0)
    train_data = std::make_unique<TokenDataset>(config.data.train, T, config.model.vocab_size,
                                                config.data.shuffle, tc.seed);
  if (!config.data.val.empty())
    val_data = std::make_unique<TokenDataset>(config.data.val, T, config.model.vocab_size, false, tc.seed);

  int64_t start_step = 0;
  std::string latest = config.checkpoint.resume ? find_latest_checkpoint(config.checkpoint.dir) : "";
  if (!latest.empty()) {
    CheckpointState state = read_checkpoint_manifest(latest);
    check_same_model(config.model, state.model, latest);
    state = load_checkpoint(latest, table, model.params(), m.data(), v.data());
    start_step = state.step;
    ODY_CHECK(
        state.next_row == uint64_t(start_step) * uint64_t(tc.global_batch),
        "checkpoint {} was written with a different train.global_batch (data position {} after {} steps)",
        latest, state.next_row, start_step);
    log_info("resumed from {} (step {})", latest, start_step);
  } else {
    init_parameters(model.params(), table, config.model, tc.seed);
  }

  LrSchedule schedule{tc.schedule, tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  AdamWConfig adamw{tc.lr, tc.beta1, tc.beta2, tc.eps, tc.weight_decay};
  auto save = [&](int64_t step) {
    CheckpointState state{config.model, step, uint64_t(step) * uint64_t(tc.global_batch), tc.seed,
                          run_config_json(config)};
    return save_checkpoint(config.checkpoint.dir, state, table, model.params(), m.data(), v.data(),
                           config.checkpoint.keep);
  };

  const double flops_per_token = training_flops_per_token(config.model, T);
  const double gemm_gflops = tc.steps > start_step ? measure_gemm_gflops() : 0.0;
  log_info("model: {} layers, {} heads, d_model {}, context {}, vocab {}: {:.2f}M parameters",
           config.model.n_layer, config.model.n_head, config.model.d_model, config.model.seq_len,
           config.model.vocab_size, P / 1e6);
  log_info("batch: {} rows x {} tokens per step ({} micro-steps of {}), {} threads; GEMM rate {:.1f} GFLOP/s",
           tc.global_batch, T, accum, tc.micro_batch, omp_get_max_threads(), gemm_gflops);

  MetricsWriter metrics(config.metrics_path(), start_step > 0);
  TrainResult result;
  result.steps = start_step;
  std::vector<int> inputs(size_t(tc.micro_batch) * T), targets(size_t(tc.micro_batch) * T);
  const float dloss = 1.0f / float(int64_t(tc.global_batch) * T);
  double total_tokens_per_s = 0;
  int64_t steps_run = 0;
  int64_t end_step = tc.steps;
  if (tc.exit_after > 0) end_step = std::min(end_step, start_step + tc.exit_after);

  for (int64_t step = start_step; step < end_step; ++step) {
    Timer timer;
    model.zero_grads();
    double loss_sum = 0;
    int64_t loss_count = 0;
    for (int micro = 0; micro < accum; ++micro) {
      uint64_t row0 = uint64_t(step) * uint64_t(tc.global_batch) + uint64_t(micro) * uint64_t(tc.micro_batch);
      for (int b = 0; b < tc.micro_batch; ++b)
        train_data->get_row(row0 + uint64_t(b), &inputs[size_t(b) * T], &targets[size_t(b) * T]);
      int64_t n = 0;
      loss_sum +=
          model.forward_backward(inputs.data(), targets.data(), nullptr, tc.micro_batch, T, dloss, &n);
      loss_count += n;
    }
    const double loss = loss_sum / double(loss_count);
    const double grad_norm = std::sqrt(sum_of_squares(model.grads(), P));
    ODY_CHECK(std::isfinite(loss) && std::isfinite(grad_norm),
              "step {}: loss {} / gradient norm {} is not finite", step + 1, loss, grad_norm);
    const float scale = clip_scale(grad_norm, tc.grad_clip);
    const float lr = schedule.at(step);
    for (const ParamInfo& p : table.tensors())
      adamw_update(model.params() + p.offset, model.grads() + p.offset, m.data() + p.offset,
                   v.data() + p.offset, size_t(p.numel), adamw, lr, step + 1, scale, p.weight_decay);
    const double ms = timer.ms();
    const int64_t step_tokens = int64_t(tc.global_batch) * T;
    const double tokens_per_s = step_tokens / (ms / 1e3);
    const double mfu = gemm_gflops > 0 ? flops_per_token * tokens_per_s / (gemm_gflops * 1e9) : 0.0;
    total_tokens_per_s += tokens_per_s;
    ++steps_run;
    result.steps = step + 1;
    result.last_loss = loss;

    nlohmann::json record = {
        {"step", step + 1},
        {"loss", loss},
        {"lr", lr},
        {"grad_norm", grad_norm},
        {"tokens", (step + 1) * step_tokens},
        {"step_ms", ms},
        {"tokens_per_s", tokens_per_s},
        {"mfu", mfu},
        {"comm", {{"total_bytes", 0}, {"intra_node_bytes", 0}, {"inter_node_bytes", 0}}}};
    const bool last = step + 1 == end_step;
    const bool eval_now = val_data && ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last);
    if (eval_now) {
      double val = evaluate_loss(model, *val_data, tc.eval_rows, tc.micro_batch);
      record["val_loss"] = val;
      result.val_loss = val;
    }
    if ((step + 1) % config.log.every == 0 || last || eval_now) metrics.write(record);
    log_info(
        "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}%",
        step + 1, tc.steps, loss, eval_now ? fmt::format(" | val {:.4f}", double(record["val_loss"])) : "",
        lr, grad_norm, ms, tokens_per_s, 100 * mfu);
    if (config.checkpoint.every > 0 && (step + 1) % config.checkpoint.every == 0 && !last) save(step + 1);
  }
  result.tokens_per_s = steps_run ? total_tokens_per_s / double(steps_run) : 0;
  if (val_data && steps_run == 0)
    result.val_loss = evaluate_loss(model, *val_data, tc.eval_rows, tc.micro_batch);
  result.checkpoint = save(result.steps);
  log_info("checkpoint: {}", result.checkpoint);
  return result;
}

}  // namespace odyssey
