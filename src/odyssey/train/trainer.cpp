#include "odyssey/train/trainer.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/core/error.h"
#include "odyssey/core/host_memory.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/core/zero_pages.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/model/architecture.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/optim/schedule.h"
#include "odyssey/parallel/sequence_shard.h"
#include "odyssey/parallel/usp_attention.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/batch_loader.h"
#include "odyssey/train/evaluate.h"
#include "odyssey/train/memory_check.h"
#include "odyssey/train/metrics.h"
#include "odyssey/train/run_directory.h"
#include "odyssey/train/sharded_checkpoint.h"
#include "odyssey/train/train_step.h"

namespace odyssey {

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

namespace {

// SIGTERM/SIGINT only raise this flag; the loop acts on it at a step boundary (saving first).
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

// Installs the stop handlers for the duration of a run and restores the previous ones.
struct StopSignals {
  struct sigaction old_term {
  }, old_int{};
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
  }
  ~StopSignals() {
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGINT, &old_int, nullptr);
  }
};

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

TrainResult run_training(const RunConfig& config, bool dry_run) {
  SingleCommunicator world("world");
  return run_training(config, world, dry_run);
}

TrainResult run_training(const RunConfig& config, Communicator& world, bool dry_run) {
  // Refused before any work, identically on every rank.
  config.validate(world.size());
  const TrainConfig& tc = config.train;
  const ParallelConfig& pc = config.parallel;
  ProcessGrid grid(world, GridDims{pc.tp, pc.sp_ulysses, pc.sp_ring, pc.dp, pc.pp, pc.ranks_per_node});
  // Rows are split over dp; each row's sequence over sp. Weights are replicated over dp x sp, so
  // their gradients are summed, and ZeRO shards, over dp_sp (= dp without sequence parallelism).
  Communicator& dp = grid.dp();
  Communicator& replicas = grid.dp_sp();
  const bool root = world.rank() == 0;
  // Cores per rank on this host unless train.threads or OMP_NUM_THREADS says otherwise (collective).
  const int host_threads = default_threads_per_rank(world);
  set_threads(tc.threads > 0 ? tc.threads : std::getenv("OMP_NUM_THREADS") ? 0 : host_threads);
  const int T = config.seq_len();
  const int ranks = dp.size();
  const int accum = tc.global_batch / (tc.micro_batch * ranks);

  const Architecture& arch = architecture(config.model.arch);
  const std::unique_ptr<Stage> stage = arch.make_model(config.model, false);
  Stage& model = *stage;
  model.set_head_chunk_tokens(config.memory.head_chunk_tokens);
  const ParamTable& table = model.table();
  const size_t P = size_t(table.total());
  ZeroOptions zo;
  zo.stage = pc.zero_stage;
  zo.bucket_mb = pc.bucket_mb;
  zo.comm.weights = config.comm.weights;
  zo.comm.grads = config.comm.grads;
  zo.comm.hpz = config.comm.hpz;
  zo.comm.grad_pipeline = config.comm.grad_pipeline;
  zo.comm.seed = tc.seed;
  {
    // dp ranks on my node (nodes hold consecutive dp ranks, as the grid lays them out).
    const std::vector<int>& node = grid.members(GridGroup::intra_node);
    int local = 0;
    for (int r : grid.members(GridGroup::dp_sp)) local += std::count(node.begin(), node.end(), r) > 0;
    zo.comm.ranks_per_node = local;
  }
  const AdamW optimizer(AdamWConfig{tc.lr, tc.beta1, tc.beta2, tc.eps, tc.weight_decay});
  ZeroEngine engine(model, replicas, zo, optimizer);

  // Sequence parallelism: attention runs across the sp groups; every rank trains on its sequence shard.
  std::unique_ptr<SequenceParallelAttention> sp_attention;
  SequenceShard shard;
  if (grid.sp().size() > 1) {
    SpAttentionOptions so;
    so.layout = pc.sp_ring_layout;
    sp_attention = std::make_unique<SequenceParallelAttention>(grid.sp_ulysses(), grid.sp_ring(), so);
    model.set_attention(sp_attention.get());
    shard = sp_attention->shard();
  }

  // Before any activation is allocated: a sequence that cannot fit on this host is refused here.
  HostMemoryNeed need;
  const uint64_t host_available = available_memory_bytes();
  if (tc.steps > 0 || dry_run) {
    const MemoryReport state = engine.memory();
    need.state_per_rank = state.params + state.grads + state.optimizer + state.comm_buffers;
    need.tokens_per_rank = T / grid.sp().size();
    need.activations_per_rank = model.activation_bytes_for(tc.micro_batch, need.tokens_per_rank);
    need.ranks_on_host = host_layout(world).local_size;
    need.seq_len = T;
    need.micro_batch = tc.micro_batch;
    check_host_memory(need, tc.host_memory_gb, host_available);
  }

  // Data first: a bad shard is refused before anything is written.
  std::unique_ptr<TokenDataset> train_data, val_data;
  if (tc.steps > 0)
    train_data = std::make_unique<TokenDataset>(config.data.train, T, config.model.vocab_size,
                                                config.data.shuffle, tc.seed);
  if (!config.data.val.empty())
    val_data = std::make_unique<TokenDataset>(config.data.val, T, config.model.vocab_size, false, tc.seed);

  if (dry_run) {
    if (root) {
      const double gib = double(uint64_t{1} << 30);
      log_info(
          "dry run: per rank {:.3f} GiB of model state (ZeRO stage {}) + {:.3f} GiB of activations "
          "({} tokens x micro_batch {}); {} rank(s) on this host need {:.3f} GiB; {:.3f} GiB available",
          need.state_per_rank / gib, pc.zero_stage, need.activations_per_rank / gib, need.tokens_per_rank,
          tc.micro_batch, need.ranks_on_host,
          (need.state_per_rank + need.activations_per_rank) * need.ranks_on_host / gib, host_available / gib);
    }
    TrainResult r;
    r.memory = need;
    r.host_available = host_available;
    return r;
  }

  // The run directory is this run's from here on (writable, locked, no other run's checkpoints): rank 0
  // claims it, an error there ends every rank, and nobody looks for a checkpoint before it is done.
  RunDirectoryLock run_lock;
  if (root) {
    const std::string note = claim_run_directory(config.checkpoint, config.metrics_path(), run_lock);
    if (!note.empty()) log_info("{}", note);
  }
  world.barrier();

  // A checkpoint (any layout) is read slice by slice, each rank taking what its ZeRO stage keeps;
  // a fresh start initializes the full state on every rank.
  int64_t start_step = 0;
  std::string latest = config.checkpoint.resume ? find_latest_checkpoint(config.checkpoint.dir) : "";
  if (!latest.empty()) {
    CheckpointState state = read_checkpoint_manifest(latest);
    check_same_model(config.model, state.model, latest);
    Timer load_timer;
    state = load_sharded_checkpoint(latest, engine, table);
    const double load_s = load_timer.seconds();
    start_step = state.step;
    ODY_CHECK(
        state.next_row == uint64_t(start_step) * uint64_t(tc.global_batch),
        "checkpoint {} was written with a different train.global_batch (data position {} after {} steps)",
        latest, state.next_row, start_step);
    if (root)
      log_info("resumed from {} (step {}, written at world size {}, ZeRO stage {}; loaded in {:.2f} s)",
               latest, start_step, state.layout.value("world_size", 0), state.layout.value("zero_stage", 0),
               load_s);
  } else {
    // Only what the engine keeps is initialised: under ZeRO-3 the rest of the dense buffer stays
    // untouched zero pages, so a fresh start holds a 1/dp share of the parameters, like a resume.
    ZeroPages params(P);
    for (const Range& r : engine.param_ranges_loaded())
      arch.init(params.data(), table, config.model, tc.seed, r.begin, r.end);
    engine.load(params.data());
  }

  LrSchedule schedule{tc.schedule, tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  // Collective: every rank writes its own slices in parallel (sharded_checkpoint.h).
  auto save = [&](int64_t step) {
    CheckpointState state;
    state.model = config.model;
    state.step = step;
    state.next_row = uint64_t(step) * uint64_t(tc.global_batch);
    state.seed = tc.seed;
    state.run = run_config_to_json(config);
    state.layout = {{"world_size", world.size()},
                    {"dp", ranks},
                    {"zero_stage", pc.zero_stage},
                    {"tp", pc.tp},
                    {"pp", pc.pp},
                    {"sp_ulysses", pc.sp_ulysses},
                    {"sp_ring", pc.sp_ring},
                    {"bucket_mb", pc.bucket_mb}};
    state.schedule = {{"name", enum_name(kScheduleNames, tc.schedule)},
                      {"lr", tc.lr},
                      {"min_lr", tc.min_lr},
                      {"warmup_steps", tc.warmup_steps},
                      {"total_steps", tc.steps},
                      {"step", step},
                      {"next_lr", schedule.at(std::min(step, std::max<int64_t>(tc.steps - 1, 0)))}};
    return save_sharded_checkpoint(replicas, engine, table, state, config.checkpoint.dir,
                                   config.checkpoint.keep);
  };

  const double flops_per_token = arch.training_flops_per_token(config.model, T);
  // The MFU denominator: the fp32 GEMM rate this machine achieves. On a shared machine a single
  // measurement can land in a busy moment, so it is measured again at every validation and the best
  // rate seen is kept (MFU never rises above 1 because the first measurement was unlucky).
  double gemm_gflops = tc.steps > start_step ? measure_gemm_gflops() : 0.0;
  if (root) {
    std::string layout = grid.describe();
    while (!layout.empty() && layout.back() == '\n') layout.pop_back();
    log_info("{}", layout);
    log_info("model: {} layers, {} heads, d_model {}, context {}, vocab {}: {:.2f}M parameters",
             config.model.n_layer, config.model.n_head, config.model.d_model, config.model.seq_len,
             config.model.vocab_size, P / 1e6);
    log_info(
        "batch: {} rows x {} tokens per step ({} micro-steps of {} rows on each of {} data-parallel ranks), "
        "{} threads per rank; GEMM rate {:.1f} GFLOP/s per rank",
        tc.global_batch, T, accum, tc.micro_batch, ranks, omp_get_max_threads(), gemm_gflops);
    log_info(
        "ZeRO stage {}: {} sharded segments (gradient buckets; units for stage 3), {} padded parameters "
        "over {} ranks",
        pc.zero_stage, engine.partition().segments().size(), engine.partition().padded_total(),
        engine.partition().ranks());
  }

  std::unique_ptr<MetricsWriter> metrics;
  if (root) metrics = std::make_unique<MetricsWriter>(config.metrics_path(), start_step > 0);
  TrainResult result;
  result.steps = start_step;
  // One micro-batch in flight: its activations, also used by validation.
  std::unique_ptr<StageActivations> acts = model.make_activations();
  std::unique_ptr<BatchLoader> train_rows, val_rows;
  if (train_data)
    train_rows =
        std::make_unique<BatchLoader>(*train_data, tc.global_batch, tc.micro_batch, dp.rank(), ranks, shard);
  if (val_data)
    val_rows =
        std::make_unique<BatchLoader>(*val_data, tc.global_batch, tc.micro_batch, dp.rank(), ranks, shard);
  const uint64_t val_row_count =
      val_data ? (tc.eval_rows > 0 ? std::min<uint64_t>(uint64_t(tc.eval_rows), val_data->rows_per_epoch())
                                   : val_data->rows_per_epoch())
               : 0;
  auto validate = [&] {
    return evaluate_distributed(model, *acts, *val_rows, val_row_count, dp.rank(), ranks, replicas);
  };
  StepSettings step_settings;
  step_settings.micro_steps = accum;
  step_settings.dloss = 1.0f / float(int64_t(tc.global_batch) * T);
  step_settings.grad_clip = tc.grad_clip;
  double total_tokens_per_s = 0;
  int64_t steps_run = 0;
  StopSignals stop_signals;
  int64_t end_step = tc.steps;
  if (tc.exit_after > 0) end_step = std::min(end_step, start_step + tc.exit_after);

  for (int64_t step = start_step; step < end_step; ++step) {
    world.stats().reset();  // the metrics report this step's traffic
    Timer timer;
    const float lr = schedule.at(step);
    const StepResult stepped =
        train_step(model, *acts, engine, *train_rows, replicas, step_settings, step, lr);
    const double loss = stepped.loss, grad_norm = stepped.grad_norm;
    const double ms = timer.ms();
    const nlohmann::json comm = world.stats().to_json();
    MemoryReport memory = engine.memory();
    memory.activations = acts->bytes() + model.attention_bytes();
    // Peak resident set size of this process and the largest over all ranks (after `comm` is read,
    // so this gather is not counted in the step's traffic).
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    const uint64_t peak_rss = uint64_t(usage.ru_maxrss) * 1024;
    std::vector<uint64_t> peak_rss_all(world.size());
    world.all_gather(&peak_rss, peak_rss_all.data(), sizeof(uint64_t), DType::u8);
    const uint64_t peak_rss_max = *std::max_element(peak_rss_all.begin(), peak_rss_all.end());
    const int64_t step_tokens = int64_t(tc.global_batch) * T;
    const double tokens_per_s = step_tokens / (ms / 1e3);
    // MFU against the GEMM rate of all ranks together.
    const double mfu =
        gemm_gflops > 0 ? flops_per_token * tokens_per_s / (gemm_gflops * 1e9 * world.size()) : 0.0;
    total_tokens_per_s += tokens_per_s;
    ++steps_run;
    result.steps = step + 1;
    result.last_loss = loss;
    result.losses.push_back(loss);
    if (root && step == start_step)
      log_info(
          "memory per rank: params {:.2f} MB, grads {:.2f} MB, optimizer {:.2f} MB, activations {:.2f} MB, "
          "comm buffers {:.2f} MB",
          memory.params / 1e6, memory.grads / 1e6, memory.optimizer / 1e6, memory.activations / 1e6,
          memory.comm_buffers / 1e6);

    nlohmann::json record = {{"step", step + 1},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"tokens", (step + 1) * step_tokens},
                             {"step_ms", ms},
                             {"tokens_per_s", tokens_per_s},
                             {"mfu", mfu},
                             {"comm", comm},
                             {"comm_bytes_per_param", engine.traffic().per_param_json(int64_t(P))},
                             {"memory", memory.to_json()},
                             {"peak_rss_bytes", peak_rss},
                             {"peak_rss_bytes_max", peak_rss_max}};
    const bool last = step + 1 == end_step;
    const bool eval_now = val_data && ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last);
    if (eval_now) {
      gemm_gflops = std::max(gemm_gflops, measure_gemm_gflops(1024, 0.1));
      double val = validate();
      record["val_loss"] = val;
      result.val_loss = val;
    }
    if (root && ((step + 1) % config.log.every == 0 || last || eval_now)) metrics->write(record);
    if (root)
      log_info(
          "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}% "
          "| "
          "comm {:.2f} MB",
          step + 1, tc.steps, loss, eval_now ? fmt::format(" | val {:.4f}", double(record["val_loss"])) : "",
          lr, grad_norm, ms, tokens_per_s, 100 * mfu, double(comm["total_bytes"]) / 1e6);
    if (config.checkpoint.every > 0 && (step + 1) % config.checkpoint.every == 0 && !last) save(step + 1);
    // Every rank learns whether any rank was signalled, so all stop (and save) at the same step.
    int32_t stop = g_stop_signal;
    world.all_reduce(&stop, 1, DType::i32);
    if (stop != 0 && !last) {
      result.stopped_by_signal = true;
      if (root) log_info("stop signal received: saving step {} and exiting", step + 1);
      break;
    }
  }
  result.tokens_per_s = steps_run ? total_tokens_per_s / double(steps_run) : 0;
  if (val_data && steps_run == 0) result.val_loss = validate();
  // A signal right after a periodic save does not write the same step twice.
  const std::string saved = fmt::format("{}/step_{:08d}", config.checkpoint.dir, result.steps);
  const bool just_saved =
      result.stopped_by_signal && config.checkpoint.every > 0 && result.steps % config.checkpoint.every == 0;
  result.checkpoint = just_saved ? saved : save(result.steps);
  if (root) log_info("checkpoint: {}", result.checkpoint);
  return result;
}

}  // namespace odyssey
