#include "odyssey/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>

#include "odyssey/comm/runtime.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/comm/wire_bytes.h"
#include "odyssey/core/error.h"
#include "odyssey/core/host_memory.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/optim/schedule.h"
#include "odyssey/train/batch_loader.h"
#include "odyssey/train/evaluate.h"
#include "odyssey/train/layout_builder.h"
#include "odyssey/train/memory_plan.h"
#include "odyssey/train/metrics.h"
#include "odyssey/train/mfu.h"
#include "odyssey/train/progress.h"
#include "odyssey/train/run_checkpoint.h"
#include "odyssey/train/run_directory.h"
#include "odyssey/train/step_metrics.h"
#include "odyssey/train/stop_signals.h"
#include "odyssey/train/train_step.h"

namespace odyssey {

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

namespace {

// The run's data, opened before anything is written (a bad shard is refused first): the training rows
// and the validation rows of this rank (its dp slice and sequence shard).
struct RunData {
  std::unique_ptr<TokenDataset> train, val;
  std::unique_ptr<BatchLoader> train_rows, val_rows;
  uint64_t val_row_count = 0;  // rows per validation (train.eval_rows, at most an epoch)

  explicit RunData(Layout& layout) {
    const RunConfig& config = layout.config;
    const TrainConfig& tc = config.train;
    const int T = config.seq_len(), V = config.model.vocab_size;
    const int rank = layout.dp().rank(), ranks = layout.dp().size();
    if (tc.steps > 0) {
      train = std::make_unique<TokenDataset>(config.data.train, T, V, config.data.shuffle, tc.seed);
      train_rows =
          std::make_unique<BatchLoader>(*train, tc.global_batch, tc.micro_batch, rank, ranks, layout.shard);
    }
    if (!config.data.val.empty()) {
      val = std::make_unique<TokenDataset>(config.data.val, T, V, false, tc.seed);
      val_rows =
          std::make_unique<BatchLoader>(*val, tc.global_batch, tc.micro_batch, rank, ranks, layout.shard);
      val_row_count = tc.eval_rows > 0 ? std::min<uint64_t>(uint64_t(tc.eval_rows), val->rows_per_epoch())
                                       : val->rows_per_epoch();
    }
  }
  double validate(Layout& layout) {
    return evaluate(*layout.runner, *val_rows, val_row_count, layout.dp().rank(), layout.dp().size(),
                    layout.replicas(), layout.step.pp);
  }
};

void log_start(Layout& layout, const std::string& auto_note, double peak_gflops,
               const std::string& peak_note) {
  const RunConfig& config = layout.config;
  const TrainConfig& tc = config.train;
  const PipelineShape& shape = layout.shape;
  std::string grid = layout.grid.describe();
  while (!grid.empty() && grid.back() == '\n') grid.pop_back();
  log_info("{}", grid);
  if (!auto_note.empty()) log_info("{}", auto_note);
  if (layout.tp_overlap) log_info("{}", layout.domino_note());
  log_info("model: {} layers, {} heads, d_model {}, context {}, vocab {}: {:.2f}M parameters",
           config.model.n_layer, config.model.n_head, config.model.d_model, config.model.seq_len,
           config.model.vocab_size, ParamTable(config.model).total() / 1e6);
  if (shape.P > 1)
    log_info(
        "pipeline: {} stages over pp {} ({} schedule, {} stage(s) per rank, {} micro-batches): layers {}",
        layout.ranges.size(), shape.P, enum_name(kPipelineScheduleNames, config.parallel.pp_schedule),
        shape.v, shape.m, describe_stage_layers(layout.ranges));
  if (shape.P > 1 && shape.m < shape.P)
    log_info(
        "warning: {} micro-batches per step for {} pipeline ranks: the ranks idle (P-1)/(m+P-1) = {:.0f}% "
        "of the schedule; raise train.global_batch or lower train.micro_batch",
        shape.m, shape.P, 100.0 * (shape.P - 1) / (shape.m + shape.P - 1));
  log_info(
      "batch: {} rows x {} tokens per step ({} micro-steps of {} rows on each of {} data-parallel ranks), "
      "{} threads per rank; MFU against a peak of {:.1f} GFLOP/s: {}",
      tc.global_batch, config.seq_len(), shape.m, tc.micro_batch, layout.grid.dp().size(),
      omp_get_max_threads(), peak_gflops, peak_note);
  if (tc.precision == Precision::bf16)
    log_info(
        "precision: bf16 (fp32 master weights, moments and gradients; a bf16 model copy held as fp32 values, "
        "the stored activations in bf16; GEMMs: {}); oneDNN bf16 matmul on this CPU: {} (oneDNN ISA {}); "
        "fp32->bf16 conversion: {}",
        layout.bf16_linears->native()
            ? "gemm_bf16 on the narrowed operands, fp32 accumulation (ODYSSEY_BF16_GEMM=native)"
            : "fp32 GEMMs of operands rounded to bf16, the emulation of mixed-precision.md §9 "
              "(ODYSSEY_BF16_GEMM=emulate, or tensor-parallel linears)",
        gemm_bf16_native() ? "native" : "none (the fallback: bf16 storage, fp32 compute)", onednn_isa(),
        bf16_convert_path().name);
  const Partition& part = layout.engines.front()->partition();
  log_info(
      "ZeRO stage {}: {} sharded segments (gradient buckets; units for stage 3), {} padded parameters over "
      "{} "
      "ranks",
      config.parallel.zero_stage, part.segments().size(), part.padded_total(), part.ranks());
}

void log_dry_run(const HostMemoryNeed& need, int zero_stage, int micro_batch, uint64_t host_available) {
  const double gib = double(uint64_t{1} << 30);
  log_info(
      "dry run: per rank {:.3f} GiB of model state (ZeRO stage {}) + {:.3f} GiB of activations "
      "({} tokens x micro_batch {}, memory.checkpoint = {}, memory.tier = {}); {} rank(s) on this host need "
      "{:.3f} GiB; {:.3f} GiB available{}",
      need.state_per_rank / gib, zero_stage, need.activations_per_rank / gib, need.tokens_per_rank,
      micro_batch, need.checkpoint, need.tier, need.ranks_on_host,
      (need.state_per_rank + need.activations_per_rank) * need.ranks_on_host / gib, host_available / gib,
      need.offload_per_rank > 0
          ? fmt::format("; {:.3f} GiB of layer inputs on disk per rank", need.offload_per_rank / gib)
          : "");
}

// --dry-run: what the memory check found, logged on rank 0 and returned.
TrainResult dry_run_result(Layout& layout, const HostMemoryNeed& need, const std::string& auto_note,
                           uint64_t host_available) {
  if (layout.root()) {
    if (!auto_note.empty()) log_info("{}", auto_note);
    if (layout.tp_overlap) log_info("{}", layout.domino_note());
    log_dry_run(need, layout.config.parallel.zero_stage, layout.config.train.micro_batch, host_available);
  }
  TrainResult result;
  result.memory = need;
  result.host_available = host_available;
  return result;
}

// Rank 0 claims the run directory (run_directory.h) and says what it found there.
void claim_directory(const RunConfig& config, RunDirectoryLock& lock) {
  const std::string note = claim_run_directory(config.checkpoint, config.metrics_path(), lock);
  if (!note.empty()) log_info("{}", note);
}

// The step's micro-steps (the pipeline's micro-batches: global_batch / (micro_batch x dp)), each
// token's loss weight (1 / the global batch's tokens) and the clipping norm.
StepSettings step_settings(const Layout& layout) {
  const TrainConfig& tc = layout.config.train;
  StepSettings settings;
  settings.micro_steps = layout.shape.m;
  settings.dloss = 1.0f / float(int64_t(tc.global_batch) * layout.config.seq_len());
  settings.grad_clip = tc.grad_clip;
  return settings;
}

// Collective: whether any rank received a stop signal (all stop, and save, at the same step).
bool any_rank_signalled(Communicator& world) {
  int32_t stop = StopSignals::received();
  world.all_reduce(&stop, 1, DType::i32);
  return stop != 0;
}

// One step and its figures (collective: the traffic, peak RSS and pipeline figures are gathered after
// the step's traffic is read, so they are not counted in it). ZeRO 1-2's after-step gathers on the
// communication thread finish in the next step, whose time and wire bytes they count in; the run's
// last step (last) waits for its own, so that the steps' wire bytes add up to the run's.
StepFigures run_step(Layout& layout, RunData& data, const StepSettings& settings, const LrSchedule& schedule,
                     int64_t step, bool last, InterNodeSentBytes& wire, double flops_per_token,
                     MfuMeter& mfu) {
  const RunConfig& config = layout.config;
  Communicator& world = layout.world;
  world.stats().reset();  // the metrics report this step's traffic
  Timer timer;
  const OffloadStats io_before = layout.runner->offload();
  StepFigures f;
  f.step = step + 1;
  f.steps = config.train.steps;
  f.lr = schedule.at(step);
  if (layout.tp_overlap) layout.tp_overlap->take_times();  // this step's collectives only
  for (auto& engine : layout.engines) engine->take_exposed_comm();
  f.result = train_step(layout.step, *data.train_rows, layout.replicas(), settings, step, f.lr);
  if (last)
    for (auto& engine : layout.engines) engine->wait_weight_gathers();
  f.ms = timer.ms();
  f.comm = world.stats().to_json();
  if (layout.tp_overlap) f.overlap = layout.tp_overlap->take_times();
  if (layout.replicas().size() > 1) {
    f.dp_comm.emplace();
    for (auto& engine : layout.engines) *f.dp_comm += engine->take_exposed_comm();
  }
  f.step_tokens = int64_t(config.train.global_batch) * config.seq_len();
  f.mfu = mfu.mfu(flops_per_token * f.tokens_per_s());
  f.peak_gflops = mfu.peak_gflops();
  f.peak_raised = mfu.raised();
  f.traffic = engines_traffic(layout);
  for (const auto& stage : layout.stages) f.params += stage->table().total();
  f.memory = live_memory(layout);
  if (config.train.precision == Precision::bf16) {
    // Bytes per dtype of this rank's state: the bf16 model copy is held as fp32 values (docs/precision.md).
    uint64_t master = 0;
    for (const auto& engine : layout.engines) master += engine->master_bytes();
    f.precision = {{"policy", "bf16"},
                   {"f32_master_bytes", master},
                   {"bf16_model_copy_bytes_held_as_f32", f.memory.params - master},
                   {"f32_grad_bytes", f.memory.grads},
                   {"f32_optimizer_bytes", f.memory.optimizer},
                   {"wire", {{"weight_gathers", "bf16"}, {"sp_activations", "bf16"}, {"grads", "f32"}}}};
  }
  std::tie(f.peak_rss, f.peak_rss_max) = peak_rss(world);
  f.inter_node_sent = wire.take(world);
  if (layout.shape.P > 1) f.pipeline = pipeline_metrics(layout, f.result, f.ms);
  if (config.memory.tier == MemoryTier::disk) {
    // This step's disk-tier traffic (the counters restart when the activations are re-sized).
    OffloadStats io = layout.runner->offload();
    if (io.bytes_written >= io_before.bytes_written && io.bytes_read >= io_before.bytes_read)
      io.bytes_written -= io_before.bytes_written, io.bytes_read -= io_before.bytes_read,
          io.stall_seconds -= io_before.stall_seconds, io.bytes_read_late -= io_before.bytes_read_late;
    f.offload = io;
  }
  return f;
}

}  // namespace

TrainResult run_training(const RunConfig& config, bool dry_run) {
  SingleCommunicator world("world");
  return run_training(config, world, dry_run);
}

TrainResult run_training(const RunConfig& config, Communicator& world, bool dry_run) {
  // Build: refused before any work, identically on every rank; cores per rank on this host unless
  // train.threads or OMP_NUM_THREADS says otherwise (collective). What this host has is read before any
  // rank allocates its model state, which the memory check counts with the activations
  // (train/memory_check.h): every rank reads it between the same two barriers.
  config.validate(world.size());
  const TrainConfig& tc = config.train;
  const int host_threads = default_threads_per_rank(world);
  set_threads(tc.threads > 0 ? tc.threads : std::getenv("OMP_NUM_THREADS") ? 0 : host_threads);
  world.barrier();
  const uint64_t host_available = available_memory_bytes();
  world.barrier();
  // The buffers are mapped as the layout is built (pages taken only when written); a budget above this
  // host's memory (train.host_memory_gb) can pass a model whose mappings the OS refuses.
  std::optional<Layout> built;
  try {
    built.emplace(config, world);
  } catch (const std::bad_alloc&) {
    fail(
        "the model (model.n_layer {}, model.d_model {}, model.vocab_size {}: {} parameters) cannot be mapped "
        "on this host{}",
        config.model.n_layer, config.model.d_model, config.model.vocab_size, config.model.num_parameters(),
        tc.host_memory_gb > 0
            ? fmt::format(" (train.host_memory_gb = {} is more than it has)", tc.host_memory_gb)
            : "");
  }
  Layout& layout = *built;
  if (config.log.comm_trace) world.stats().set_trace(true);  // each step's calls in its metrics
  const bool root = layout.root();
  std::string auto_note;
  const HostMemoryNeed need = plan_memory(layout, host_available, dry_run, &auto_note);
  RunData data(layout);
  if (dry_run) return dry_run_result(layout, need, auto_note, host_available);
  layout.start_offload(need.offload_per_rank);

  // Resume: the run directory is this run's from here on (writable, locked, no other run's checkpoints):
  // rank 0 claims it, an error there ends every rank, and nobody looks for a checkpoint before it is done.
  RunDirectoryLock run_lock;
  if (root) claim_directory(config, run_lock);
  world.barrier();
  const int64_t start_step = resume_or_init(layout);
  const LrSchedule schedule{tc.schedule, tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  const double flops_per_token = layout.arch.training_flops_per_token(config.model, config.seq_len());
  // MFU's denominator: the peak of the cores the job computes on, or train.gemm_gflops (train/mfu.h).
  std::string peak_note;
  MfuMeter mfu(job_peak_gflops(world, omp_get_max_threads(), tc.gemm_gflops, &peak_note));
  if (root) log_start(layout, auto_note, mfu.peak_gflops(), peak_note);
  std::unique_ptr<MetricsWriter> metrics;
  if (root) metrics = std::make_unique<MetricsWriter>(config.metrics_path(), start_step > 0);
  const StepSettings settings = step_settings(layout);
  TrainResult result;
  result.steps = start_step;
  double total_tokens_per_s = 0;
  StopSignals stop_signals;
  // exit_after compared with the steps left, so that a huge value cannot overflow start_step + exit_after.
  const int64_t end_step =
      tc.exit_after > 0 && tc.exit_after < tc.steps - start_step ? start_step + tc.exit_after : tc.steps;
  const Progress progress(start_step, end_step);

  // Loop: step, record, evaluate, save, and stop (saving) when any rank was signalled.
  InterNodeSentBytes wire;  // the bytes the steps put on the links between hosts
  wire.start();
  for (int64_t step = start_step; step < end_step; ++step) {
    StepFigures f =
        run_step(layout, data, settings, schedule, step, step + 1 == end_step, wire, flops_per_token, mfu);
    total_tokens_per_s += f.tokens_per_s();
    result.steps = step + 1;
    result.last_loss = f.result.loss;
    result.losses.push_back(f.result.loss);
    if (root && step == start_step) log_info("{}", memory_line(f.memory));
    // mixed-precision.md §5.6: the implementation of every bf16 GEMM shape the first step created.
    if (root && step == start_step && layout.bf16_linears && layout.bf16_linears->native())
      for (const std::string& line : gemm_bf16_primitives()) log_info("gemm_bf16 {}", line);
    result.last_record = step_record(f);
    const bool last = step + 1 == end_step;
    const bool eval_now = data.val && ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last);
    if (eval_now) f.val_loss = result.val_loss = data.validate(layout);
    if (root && ((step + 1) % config.log.every == 0 || last || eval_now)) metrics->write(step_record(f));
    if (root) log_info("{}{}", step_line(f), progress.line(step + 1));
    if (config.checkpoint.every > 0 && (step + 1) % config.checkpoint.every == 0 && !last)
      save_run_checkpoint(layout, step + 1, schedule);
    if (any_rank_signalled(world) && !last) {
      result.stopped_by_signal = true;
      if (root) log_info("stop signal received: saving step {} and exiting", step + 1);
      break;
    }
  }
  const int64_t steps_run = result.steps - start_step;
  result.tokens_per_s = steps_run ? total_tokens_per_s / double(steps_run) : 0;
  if (data.val && steps_run == 0) result.val_loss = data.validate(layout);
  // A signal right after a periodic save does not write the same step twice.
  const bool just_saved =
      result.stopped_by_signal && config.checkpoint.every > 0 && result.steps % config.checkpoint.every == 0;
  result.checkpoint = just_saved ? fmt::format("{}/step_{:08d}", config.checkpoint.dir, result.steps)
                                 : save_run_checkpoint(layout, result.steps, schedule);
  if (root) log_info("checkpoint: {}", result.checkpoint);
  return result;
}

}  // namespace odyssey
