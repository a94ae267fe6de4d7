// Training-step throughput of our GPT-2 on random tokens, printed as one JSON object on stdout.
//
// A step is the trainer's own train_step (train/train_step.h) in one process: ZeRO stage 0 over a
// one-rank group, as `odyssey train` runs without MPI: zero the gradients, forward, loss, backward,
// global gradient norm, clip scale, AdamW. tokens_per_s and step_ms are medians over the steps after
// the warm-up steps. MFU = achieved model FLOP/s (training_flops_per_token x tokens/s) divided by the
// oneDNN fp32 GEMM rate measured in this process: gemm_gflops is measure_gemm_gflops(1024) (square
// 1024^3, through gemm()), taken once before the warm-up and once after every step, median; gemm_fc_gflops
// is the same for the model's own largest layer GEMM, the MLP c_fc forward [B*T, 4C] = [B*T, C] W^T
// with bias, as linear_forward runs it.
//
// On a shared machine wall time measures the neighbours too. The *_cpu fields redo the figures with
// process CPU time / threads in place of wall time (step_cpu_ms, achieved_gflops_cpu, gemm_gflops_cpu
// for the same 1024^3 GEMM, mfu_cpu): an estimate for unshared cores, valid when waiting threads sleep
// (OMP_WAIT_POLICY=passive) rather than spin. cpu_share = CPU time / wall time / threads.
//
// phases_ms (medians, per step) come from the model's unit hooks (LayerHooks, passed on to the
// engine's), a timing AttentionOp wrapper and train_step's own observer, so they cost nothing: embedding,
// layers and final norm forward; head_and_loss (the LM head, cross-entropy and their gradient, fused and
// chunked over --head-chunk tokens); final norm, layers and embedding backward; attention_fwd/bwd are the
// parts of layers_fwd/bwd spent in attention. -1: the model did not call that hook.
//
// --profile K additionally runs K steps (after the timed ones; the last is reported) through train_step
// with an OpObserver (model/op_observer.h) that times every kernel call the stage and its
// blocks make, and reports ms and GFLOP/s per op and per kind (gemm, attention, layernorm, gelu, ...).
// Its loss is checked against the model's.
//
// Usage: bench_train [--n-layer 12] [--n-head 12] [--d-model 768] [--seq-len 1024] [--vocab 50257]
//                    [--batch 1] [--steps 3] [--warmup 1] [--threads 2] [--seed 1] [--profile 0]
//                    [--head-chunk 1024] [--chunk 4096] [--recompute 0|1]
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "odyssey/comm/single_communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/params.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/train_step.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;
using nlohmann::json;

namespace {

struct Args {
  int n_layer = 12, n_head = 12, d_model = 768, seq_len = 1024, vocab = 50257;
  int batch = 1, steps = 3, warmup = 1, threads = 2, seed = 1, profile = 0;
  int head_chunk = 1024;  // memory.head_chunk_tokens, as the trainer's default
  int chunk = 4096;       // memory.chunk_tokens, as the trainer's default
  int recompute = 0;      // 1: memory.checkpoint = full
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::map<std::string, int*> keys = {
      {"--n-layer", &a.n_layer}, {"--n-head", &a.n_head},      {"--d-model", &a.d_model},
      {"--seq-len", &a.seq_len}, {"--vocab", &a.vocab},        {"--batch", &a.batch},
      {"--steps", &a.steps},     {"--warmup", &a.warmup},      {"--threads", &a.threads},
      {"--seed", &a.seed},       {"--profile", &a.profile},    {"--head-chunk", &a.head_chunk},
      {"--chunk", &a.chunk},     {"--recompute", &a.recompute}};
  for (int i = 1; i < argc; ++i) {
    auto it = keys.find(argv[i]);
    if (it == keys.end() || i + 1 >= argc) {
      fmt::print(stderr, "bench_train: unknown option or missing value: {}\n", argv[i]);
      std::exit(2);
    }
    *it->second = std::atoi(argv[++i]);
  }
  if (a.steps < 1 || a.warmup < 0 || a.batch < 1 || a.threads < 1) {
    fmt::print(stderr, "bench_train: need steps >= 1, warmup >= 0, batch >= 1, threads >= 1\n");
    std::exit(2);
  }
  return a;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the whole process (all threads): cpu / wall / threads tells how much of its cores a run
// really had on a shared machine (OpenMP spin-waiting counts as CPU, so 1.0 is not all useful work).
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double now_ms() {
  static Timer clock;
  return clock.ms();
}

// Timestamps of the model's unit hooks (model/gpt2.h: unit 0 embeddings and LM head, 1 + l layer l,
// L + 1 final norm). Events are keyed "bf3#0": before_forward(3), first time in this step.
struct PhaseHooks : LayerHooks {
  LayerHooks* next = nullptr;  // the engine's hooks, called after the timestamp
  std::map<std::string, double> t;
  std::map<std::string, int> seen;
  void mark(char kind, int unit) {
    std::string key = fmt::format("{}{}",
                                  kind == 'F'   ? "bf"
                                  : kind == 'f' ? "af"
                                  : kind == 'B' ? "bb"
                                                : "ab",
                                  unit);
    t[fmt::format("{}#{}", key, seen[key]++)] = now_ms();
  }
  void before_forward(int u) override { mark('F', u), next->before_forward(u); }
  void after_forward(int u) override { mark('f', u), next->after_forward(u); }
  void before_backward(int u) override { mark('B', u), next->before_backward(u); }
  void after_backward(int u) override { mark('b', u), next->after_backward(u); }
  void clear() { t.clear(), seen.clear(); }
  // Time from event a to event b, or -1 if either is missing.
  double span(const std::string& a, const std::string& b) const {
    auto ia = t.find(a), ib = t.find(b);
    return ia == t.end() || ib == t.end() ? -1.0 : ib->second - ia->second;
  }
};

// The local attention, timed.
struct TimedAttention : AttentionOp {
  LocalAttention inner;
  double fwd_ms = 0, bwd_ms = 0;
  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override {
    double t = now_ms();
    inner.forward(out, lse, qkv, B, T, H, D, saved);
    fwd_ms += now_ms() - t;
  }
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override {
    double t = now_ms();
    inner.backward(dqkv, dout, out, lse, qkv, B, T, H, D, saved);
    bwd_ms += now_ms() - t;
  }
};

// GFLOP/s of one GEMM shape through gemm(), after a warm-up call, for about `seconds`: by wall time,
// and by process CPU time / threads (what the shape would run at on unshared cores; see cpu_ms).
struct GemmRate {
  double wall, cpu;
};
GemmRate gemm_shape_gflops(int M, int N, int K, bool trans_b, bool with_bias, double seconds, int threads) {
  std::vector<float> a(size_t(M) * K, 0.01f), b(size_t(K) * N, 0.02f), c(size_t(M) * N, 0.0f),
      bias(size_t(N), 0.0f);
  const float* bp = with_bias ? bias.data() : nullptr;
  gemm(c.data(), a.data(), b.data(), bp, M, N, K, false, trans_b, false);
  Timer timer;
  const double c0 = cpu_ms();
  long calls = 0;
  do {
    gemm(c.data(), a.data(), b.data(), bp, M, N, K, false, trans_b, false);
    ++calls;
  } while (timer.seconds() < seconds);
  const double flops = 2.0 * M * N * double(K) * calls, wall = timer.seconds();
  return {flops / wall / 1e9, flops / ((cpu_ms() - c0) / 1e3 / threads) / 1e9};
}

// ------------------------------------------------------------------------------------------------
// Op-by-op profile: the model's own step with an observer timing every kernel call.

struct OpStat {
  double ms = 0, cpu_ms = 0, flops = 0;
  int calls = 0;
};

class Profiler : public OpObserver {
  static json entry(const OpStat& s, int threads, double step_ms) {
    json o = {{"ms", s.ms}, {"cpu_ms", s.cpu_ms / threads}, {"pct", 100 * s.ms / step_ms}};
    if (s.flops > 0) {
      o["gflops"] = s.flops / (s.ms * 1e6);
      o["gflops_cpu"] = s.flops / (s.cpu_ms / threads * 1e6);
    }
    return o;
  }

 public:
  void begin_op(const char* name, double flops) override {
    name_ = name;
    flops_ = flops;
    t_ = now_ms();
    c_ = cpu_ms();
  }
  void end_op() override {
    OpStat& s = stats_[name_];
    s.ms += now_ms() - t_;
    s.cpu_ms += cpu_ms() - c_;
    s.flops += flops_;
    ++s.calls;
    if (std::find(order_.begin(), order_.end(), name_) == order_.end()) order_.push_back(name_);
  }
  // Wall time of the op called name so far (0 if it never ran).
  double ms(const std::string& name) const {
    auto it = stats_.find(name);
    return it == stats_.end() ? 0.0 : it->second.ms;
  }
  // ms: wall time; cpu_ms: process CPU time over the op divided by the thread count, an estimate of
  // the op's time on an unshared machine (run with OMP_WAIT_POLICY=passive so that waiting threads
  // sleep instead of spinning, else spinning counts as CPU time).
  json report(double step_ms, int threads) const {
    json ops = json::object(), kinds = json::object();
    std::map<std::string, OpStat> by_kind;
    double total = 0, total_cpu = 0;
    for (const auto& name : order_) {
      const OpStat& s = stats_.at(name);
      ops[name] = entry(s, threads, step_ms);
      ops[name]["calls"] = s.calls;
      OpStat& k = by_kind[name.substr(0, name.find('.'))];
      k.ms += s.ms;
      k.cpu_ms += s.cpu_ms;
      k.flops += s.flops;
      total += s.ms;
      total_cpu += s.cpu_ms / threads;
    }
    for (const auto& [kind, s] : by_kind) kinds[kind] = entry(s, threads, step_ms);
    return {{"step_ms", step_ms},
            {"timed_ms", total},
            {"timed_cpu_ms", total_cpu},
            {"by_kind", kinds},
            {"ops", ops}};
  }

 private:
  std::map<std::string, OpStat> stats_;
  std::vector<std::string> order_;
  std::string name_;  // of the op being timed (ops do not nest)
  double flops_ = 0, t_ = 0, c_ = 0;
};

// Random tokens, new ones at every load unless frozen (the profile compares two runs on the same rows).
class RandomRows final : public MicroBatches {
 public:
  RandomRows(int B, int T, int vocab, uint32_t seed)
      : B_(B), T_(T), rng_(seed), token_(0, vocab - 1), inputs_(size_t(B) * T), targets_(size_t(B) * T) {}
  int rows() const override { return B_; }
  int local_len() const override { return T_; }
  const int* positions() const override { return nullptr; }
  void load(int64_t, int, int* inputs, int* targets) override {
    if (!frozen) {
      for (int& t : inputs_) t = token_(rng_);
      for (int& t : targets_) t = token_(rng_);
    }
    std::copy(inputs_.begin(), inputs_.end(), inputs);
    std::copy(targets_.begin(), targets_.end(), targets);
  }
  bool frozen = false;

 private:
  int B_, T_;
  std::mt19937 rng_;
  std::uniform_int_distribution<int> token_;
  std::vector<int> inputs_, targets_;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  omp_set_num_threads(args.threads);

  ModelConfig config;
  config.n_layer = args.n_layer;
  config.n_head = args.n_head;
  config.d_model = args.d_model;
  config.seq_len = args.seq_len;
  config.vocab_size = args.vocab;
  GPT2 model(config, false);
  model.set_memory(MemoryOptions{args.recompute ? CheckpointPolicy::full : CheckpointPolicy::none,
                                 args.head_chunk, args.chunk});
  const AdamW adamw(AdamWConfig{});
  SingleCommunicator single("bench");
  ZeroEngine engine(model, single, ZeroOptions{}, adamw);
  {
    FloatBuffer init(size_t(model.num_params()));
    init_parameters(init.data(), model.table(), config, uint64_t(args.seed));
    engine.load(init.data());
  }
  const int64_t P = model.num_params();
  const int B = args.batch, T = args.seq_len, N = B * T, L = args.n_layer;

  PhaseHooks hooks;
  hooks.next = &engine;
  std::map<std::string, std::vector<double>> phase;
  TimedAttention attention;
  model.set_hooks(&hooks);
  model.set_attention(&attention);
  RandomRows rows(B, T, args.vocab, uint32_t(args.seed));
  auto acts = model.make_activations();
  StepSettings settings;
  settings.dloss = 1.0f / float(N);
  settings.grad_clip = 1.0f;
  OneStagePipeline pipe(model, engine, settings.micro_steps);  // the trainer's step over one stage

  const GemmRate gemm_fc =
      gemm_shape_gflops(N, 4 * args.d_model, args.d_model, true, true, 0.3, args.threads);
  // The official rate (measure_gemm_gflops, wall time) and the same square GEMM by CPU time.
  std::vector<double> gemm_rates, gemm_rates_cpu;
  auto measure_gemm = [&] {
    gemm_rates.push_back(measure_gemm_gflops(1024, 0.3));
    gemm_rates_cpu.push_back(gemm_shape_gflops(1024, 1024, 1024, false, false, 0.3, args.threads).cpu);
  };
  measure_gemm();
  std::vector<double> step_ms, step_cpu_ms, cpu_share, zero_ms, fb_ms, attn_f, attn_b, norm_ms, opt_ms;
  double loss = 0, grad_norm = 0;
  int64_t step = 0;
  for (int s = 0; s < args.warmup + args.steps; ++s, ++step) {
    attention.fwd_ms = attention.bwd_ms = 0;
    hooks.clear();
    Profiler own;  // train_step's own phases
    double t0 = now_ms(), c0 = cpu_ms();
    const StepResult r = train_step(pipe.step, rows, single, settings, step, adamw.config().lr, &own);
    double t4 = now_ms(), c4 = cpu_ms();
    loss = r.loss, grad_norm = r.grad_norm;
    fmt::print(stderr, "step {}{}: {:.0f} ms, loss {:.4f}, grad norm {:.3f}\n", s + 1,
               s < args.warmup ? " (warm-up)" : "", t4 - t0, loss, grad_norm);
    measure_gemm();
    if (s < args.warmup) continue;
    step_ms.push_back(t4 - t0);
    cpu_share.push_back((c4 - c0) / (t4 - t0) / args.threads);
    step_cpu_ms.push_back((c4 - c0) / args.threads);
    zero_ms.push_back(own.ms("memset.zero_grads"));
    norm_ms.push_back(own.ms("optim.grad_norm"));
    opt_ms.push_back(own.ms("optim.update"));
    fb_ms.push_back(t4 - t0 - zero_ms.back() - norm_ms.back() - opt_ms.back());
    // Phases between hook events (see PhaseHooks); -1 where the model did not call a hook.
    const std::string Lu = std::to_string(L), Fu = std::to_string(L + 1);
    auto push = [&](const char* name, double ms) { phase[name].push_back(ms); };
    push("embedding_fwd", hooks.span("bf0#0", "af0#0"));
    push("layers_fwd", hooks.span("bf1#0", "af" + Lu + "#0"));
    push("lnf_fwd", hooks.span("bf" + Fu + "#0", "af" + Fu + "#0"));
    push("head_and_loss", hooks.span("af0#1", "bb" + Fu + "#0"));  // fused LM head, loss and their gradient
    push("lnf_bwd", hooks.span("bb" + Fu + "#0", "ab" + Fu + "#0"));
    push("layers_bwd", hooks.span("bb" + Lu + "#0", "ab1#0"));
    push("embedding_bwd", hooks.span("ab1#0", "ab0#0"));
    attn_f.push_back(attention.fwd_ms);
    attn_b.push_back(attention.bwd_ms);
  }

  const double ms = median(step_ms);
  const double tokens_per_s = N / (ms / 1e3);
  const double flops_per_token = training_flops_per_token(config, T);
  const double achieved = flops_per_token * tokens_per_s / 1e9;
  const double gemm_gflops = median(gemm_rates);
  // By CPU time: the step and the GEMM as they would run on unshared cores.
  const double achieved_cpu = flops_per_token * N / (median(step_cpu_ms) / 1e3) / 1e9;
  const double gemm_gflops_cpu = median(gemm_rates_cpu);
  json out = {
      {"engine", "odyssey"},
      {"host", host_json(args.threads)},
      {"config",
       {{"n_layer", args.n_layer},
        {"n_head", args.n_head},
        {"d_model", args.d_model},
        {"seq_len", T},
        {"vocab", args.vocab},
        {"batch", B},
        {"threads", args.threads},
        {"steps", args.steps},
        {"warmup", args.warmup},
        {"head_chunk_tokens", args.head_chunk},
        {"chunk_tokens", args.chunk},
        {"checkpoint", args.recompute ? "full" : "none"}}},
      {"params", P},
      {"tokens_per_step", N},
      {"tokens_per_s", tokens_per_s},
      {"step_ms", ms},
      {"step_ms_all", step_ms},
      {"cpu_share", median(cpu_share)},
      {"flops_per_token", flops_per_token},
      {"achieved_gflops", achieved},
      {"gemm_gflops", gemm_gflops},
      {"gemm_gflops_all", gemm_rates},
      {"gemm_note",
       "gemm_gflops: measure_gemm_gflops(1024), square fp32 through gemm(), median of one before "
       "warm-up and one after each step; gemm_fc_gflops: [B*T,C]x[C,4C]+bias (c_fc forward)"},
      {"gemm_fc_gflops", gemm_fc.wall},
      {"mfu", achieved / gemm_gflops},
      {"mfu_vs_fc_gemm", achieved / gemm_fc.wall},
      {"cpu_time_note",
       "by process CPU time / threads instead of wall time: an estimate for unshared cores, "
       "valid with OMP_WAIT_POLICY=passive (spinning threads count as CPU time)"},
      {"step_cpu_ms", median(step_cpu_ms)},
      {"achieved_gflops_cpu", achieved_cpu},
      {"gemm_gflops_cpu", gemm_gflops_cpu},
      {"gemm_fc_gflops_cpu", gemm_fc.cpu},
      {"mfu_cpu", achieved_cpu / gemm_gflops_cpu},
      {"loss", loss},
      {"grad_norm", grad_norm},
  };
  json phases = {{"zero_grads", median(zero_ms)}, {"forward_backward", median(fb_ms)}};
  for (const auto& [name, v] : phase) phases[name] = median(v);
  phases["attention_fwd"] = median(attn_f);
  phases["attention_bwd"] = median(attn_b);
  phases["grad_norm"] = median(norm_ms);
  phases["optimizer"] = median(opt_ms);
  out["phases_ms"] = phases;
  if (args.profile) {
    model.set_hooks(&engine);
    model.set_attention(nullptr);
    // Reference loss on fixed rows through the model, then the same rows through the profiled step.
    rows.frozen = false;
    std::vector<int> inputs(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
    rows.load(0, 0, inputs.data(), targets.data());
    rows.frozen = true;
    int64_t count = 0;
    model.forward(*acts, inputs.data(), targets.data(), nullptr, B, T);
    const double model_mean = model.loss(*acts, 0.0f, &count) / double(count);
    // --profile K: K profiled steps, the last one reported (the first pays page faults of its buffers).
    json report;
    double prof_loss = 0;
    for (int k = 0; k < args.profile; ++k, ++step) {
      Profiler prof;
      model.set_observer(&prof);
      double t0 = now_ms();
      const StepResult r = train_step(pipe.step, rows, single, settings, step, adamw.config().lr, &prof);
      report = prof.report(now_ms() - t0, args.threads);
      model.set_observer(nullptr);
      if (k == 0) prof_loss = r.loss;  // before its own update: comparable with the model's loss
    }
    report["loss_profiled"] = prof_loss;
    report["loss_model"] = model_mean;
    out["profile"] = report;
  }
  fmt::print("{}\n", out.dump());
  return 0;
}
