#include "odyssey/train/trainer.h"

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <optional>
#include <vector>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/same_model.h"
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
#include "odyssey/model/deferred_weight_grads.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/optim/schedule.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/sequence_shard.h"
#include "odyssey/parallel/tp_grads.h"
#include "odyssey/parallel/tp_linear.h"
#include "odyssey/parallel/usp_attention.h"
#include "odyssey/parallel/vocab_parallel.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/batch_loader.h"
#include "odyssey/train/evaluate.h"
#include "odyssey/train/memory_check.h"
#include "odyssey/train/metrics.h"
#include "odyssey/train/offload_directory.h"
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

// ZeRO's view of the [parallel] and [comm] keys on this grid.
ZeroOptions zero_options(const RunConfig& config, ProcessGrid& grid) {
  ZeroOptions zo;
  zo.stage = config.parallel.zero_stage;
  zo.bucket_mb = config.parallel.bucket_mb;
  zo.comm.weights = config.comm.weights;
  zo.comm.grads = config.comm.grads;
  zo.comm.hpz = config.comm.hpz;
  zo.comm.grad_pipeline = config.comm.grad_pipeline;
  zo.comm.seed = config.train.seed;
  // dp ranks on my node (nodes hold consecutive dp ranks, as the grid lays them out).
  const std::vector<int>& node = grid.members(GridGroup::intra_node);
  int local = 0;
  for (int r : grid.members(GridGroup::dp_sp)) local += std::count(node.begin(), node.end(), r) > 0;
  zo.comm.ranks_per_node = local;
  return zo;
}

// Everything a run is built from, in build order (torchtitan's build phase): the grid, the model (this
// rank's stages of the registered architecture: the whole model, or under pipeline parallelism its
// parallel.pp_virtual stages of the split), the optimizer and a ZeRO engine over each stage, the
// sequence-parallel attention, the pipeline runner, and the data. Rows are split over dp; each row's
// sequence over sp. Weights are replicated over dp x sp, so their gradients are summed, and ZeRO
// shards, over dp_sp (= dp without sequence parallelism); stages differ over pp.
// A model too large for the host is refused before its allocation fails (also under --dry-run).
// A pipeline rank holds only its stages, a tensor-parallel rank its pieces: the check takes the
// largest rank's share (the same on every rank, so all refuse alike).
void check_model_fits(const RunConfig& c, const Architecture& arch,
                      const std::vector<std::pair<int, int>>& ranges, int replicas, Communicator& world) {
  int64_t per_rank = 0;
  if (c.parallel.pp > 1 || c.parallel.tp > 1) {
    std::vector<int64_t> held(size_t(c.parallel.pp), 0);
    for (size_t s = 0; s < ranges.size(); ++s)
      held[s % held.size()] += arch.make_stage(c.model, StageRange{ranges[s].first, ranges[s].second}, false,
                                               TpPiece{c.parallel.tp, 0})
                                   ->table()
                                   .total();
    per_rank = *std::max_element(held.begin(), held.end());
  }
  check_model_state(c.model, c.parallel.zero_stage, replicas, host_layout(world).local_size,
                    c.train.host_memory_gb, available_memory_bytes(), per_rank);
}

// The layer ranges of every stage: the whole model, or the pipeline's split (parallel.pp_layers or
// split_layers), stage s on pp rank s % pp as its chunk s / pp.
std::vector<std::pair<int, int>> stage_ranges(const RunConfig& c) {
  if (c.parallel.pp == 1) return {{0, c.model.n_layer}};
  return stage_layers(c.model.n_layer, c.parallel.pp * c.parallel.pp_virtual, c.parallel.pp_layers);
}

struct Run {
  const RunConfig& config;
  Communicator& world;
  ProcessGrid grid;
  Communicator& dp;
  Communicator& replicas;
  const Architecture& arch;
  std::vector<std::pair<int, int>> ranges;     // every stage's layers
  std::vector<std::unique_ptr<Stage>> models;  // this rank's stages (chunks), in chunk order
  AdamW optimizer;
  std::vector<std::unique_ptr<ZeroEngine>> engines;  // one per stage, over models and optimizer
  std::unique_ptr<SequenceParallelAttention> sp_attention;
  SequenceShard shard;
  std::unique_ptr<TokenDataset> train_data, val_data;
  std::string auto_note;  // which policy memory.checkpoint = auto picked, and why (logged at start)
  // Tensor parallelism (parallel.tp > 1): the stages' linear and vocabulary ops over the tp group, the
  // kv group (replicated key/value heads), and each stage's gradient plan.
  std::unique_ptr<CommThread> tp_overlap;  // parallel.tp_overlap = domino: its reductions' thread
  std::unique_ptr<TensorParallelLinears> tp_linears;
  std::unique_ptr<VocabParallelOps> tp_vocab;
  std::unique_ptr<Communicator> kv_group;
  std::vector<TpGradients> tp_grads;
  CheckpointPolicy policy = CheckpointPolicy::none;  // memory.checkpoint, auto resolved (check_memory)
  std::unique_ptr<OffloadDirectory> offload_dir;     // memory.tier = disk: this rank's (start_offload)
  // Pipeline parallelism (parallel.pp > 1).
  PipelineShape shape;
  std::unique_ptr<PipelineRunner> pipeline;
  std::unique_ptr<Communicator> embd;  // the tied embedding's holders (first and last stage)
  PipelineStep pipe;

  Run(const RunConfig& c, Communicator& w)
      : config(c),
        world(w),
        grid(w, GridDims{c.parallel.tp, c.parallel.sp_ulysses, c.parallel.sp_ring, c.parallel.dp,
                         c.parallel.pp, c.parallel.ranks_per_node}),
        dp(grid.dp()),
        replicas(grid.dp_sp()),
        arch(architecture(c.model.arch)),
        ranges(stage_ranges(c)),
        optimizer(AdamWConfig{c.train.lr, c.train.beta1, c.train.beta2, c.train.eps, c.train.weight_decay}) {
    check_model_fits(c, arch, ranges, replicas.size(), w);
    const int P = c.parallel.pp, v = P > 1 ? c.parallel.pp_virtual : 1;
    Communicator& tp = grid.tp();
    if (tp.size() > 1) {
      if (c.parallel.tp_overlap == TpOverlap::domino) {
        // A duplicate of the tp group, used by the communication thread alone (its bytes count as tp's).
        ODY_CHECK(
            runtime_thread_multiple(),
            "parallel.tp_overlap = domino runs the tensor-parallel reductions on a communication "
            "thread, which needs an MPI library with MPI_THREAD_MULTIPLE (this one does not provide it)");
        tp_overlap = std::make_unique<CommThread>(tp.split(0, tp.rank(), tp.name(), tp.intra_node()));
      }
      tp_linears = std::make_unique<TensorParallelLinears>(tp, c.parallel.tp_sp, tp_overlap.get());
      tp_vocab = std::make_unique<VocabParallelOps>(tp, c.model.vocab_size, c.parallel.tp_sp);
      // Collective over the world: every rank takes part, those without a replicated head with -1.
      const int color =
          kv_group_color(c.model.kv_heads(), tp.size(), tp.rank(), grid.members(GridGroup::tp)[0]);
      kv_group = w.split(color, w.rank(), "tp_kv", grid.num_nodes() == 1);
    }
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto [begin, end] = ranges[size_t(chunk * P + grid.coords().pp)];
      models.push_back(
          arch.make_stage(c.model, StageRange{begin, end}, false, TpPiece{tp.size(), tp.rank()}));
      if (tp.size() > 1) {
        models.back()->set_tensor_parallel(tp_linears.get(), tp_vocab.get());
        tp_grads.push_back(TpGradients::plan(models.back()->table(), tp, kv_group.get(), c.parallel.tp_sp));
      }
    }
    // memory.checkpoint = auto is resolved by check_memory; until then the stage keeps everything.
    const bool automatic = c.memory.checkpoint == CheckpointPolicy::automatic;
    policy = automatic ? CheckpointPolicy::none : c.memory.checkpoint;
    for (auto& model : models) {
      model->set_memory(
          automatic ? MemoryOptions{CheckpointPolicy::none, c.memory.head_chunk_tokens, c.layer_chunk_rows()}
                    : memory_options(c.memory.checkpoint));
      engines.push_back(std::make_unique<ZeroEngine>(*model, replicas, zero_options(c, grid), optimizer));
    }
    // Sequence parallelism: attention runs across the sp groups; every rank trains on its sequence shard.
    if (grid.sp().size() > 1) {
      SpAttentionOptions so;
      so.layout = c.parallel.sp_ring_layout;
      // The key/value heads of this tp rank (its share, or the one it holds when they are replicated).
      so.n_kv_head = c.model.kv_heads() % tp.size() == 0 ? c.model.kv_heads() / tp.size() : 1;
      // Query-chunked Ulysses deals the ranks' tokens by chunk; TP-SP runs the attention whole
      // (model/query_chunks.h).
      so.chunk_tokens = tp.size() > 1 && c.parallel.tp_sp ? 0 : c.memory.chunk_tokens;
      sp_attention = std::make_unique<SequenceParallelAttention>(grid.sp_ulysses(), grid.sp_ring(), so);
      for (auto& model : models) model->set_attention(sp_attention.get());
      shard = sp_attention->shard();
    }
    if (P > 1) build_pipeline();
  }
  Stage& model() { return *models.front(); }

  // The stages' memory options under a policy; the disk tier's files go to this rank's own directory
  // once it exists (start_offload), memory.offload_dir until then (only sized, never written).
  MemoryOptions memory_options(CheckpointPolicy checkpoint) const {
    const MemoryConfig& m = config.memory;
    return MemoryOptions{checkpoint, m.head_chunk_tokens, config.layer_chunk_rows(), m.tier,
                         offload_dir ? offload_dir->path() : m.offload_dir};
  }
  // memory.tier = disk: this rank's scratch directory, and the stages told to use it.
  void start_offload(const HostMemoryNeed& need) {
    if (config.memory.tier != MemoryTier::disk || !keeps_layer_inputs(policy)) return;
    offload_dir = std::make_unique<OffloadDirectory>(config.memory.offload_dir, world.rank());
    for (auto& model : models) model->set_memory(memory_options(policy));
    if (root())
      log_info("memory.tier = disk: {} of layer inputs per rank in {} (rank 0's scratch directory)",
               size(need.offload_per_rank), offload_dir->path());
  }
  ZeroEngine& engine() { return *engines.front(); }

  // The runner over this rank's stages, and the tied embedding: a stage with the head but not the
  // embeddings holds a copy of an embeddings-unit tensor; its gradient is summed with the first
  // stage's over `embd` (ZeRO 0: the pair with my dp x sp coordinates; ZeRO >= 1: both stages' whole
  // dp x sp groups, each rank its shard), and the norm counts it on the first stage only.
  void build_pipeline() {
    const int P = config.parallel.pp;
    shape = PipelineShape{P, int(models.size()),
                          config.train.global_batch / (config.train.micro_batch * dp.size())};
    std::vector<Stage*> chunks;
    for (auto& model : models) chunks.push_back(model.get());
    pipeline = std::make_unique<PipelineRunner>(grid.pp(), chunks, shape, config.parallel.pp_schedule);
    pipe.runner = pipeline.get();
    pipe.pp = &grid.pp();
    for (auto& engine : engines) pipe.engines.push_back(engine.get());
    pipe.tp = std::move(tp_grads);  // the pipeline step sums them (step_settings.tp stays null)
    pipeline->set_engines(pipe.engines);
    // The tied tensor's name: in the last stage's table, from the whole model's embeddings unit.
    const ParamTable whole(config.model);
    const auto [lb, le] = ranges.back();
    const ParamTable last = arch.make_stage(config.model, StageRange{lb, le}, false, {})->table();
    std::string tied;
    for (const ParamInfo& t : last.tensors())
      if (whole.find(t.name).unit == 0) tied = t.name;
    bool holder = false;
    for (size_t c = 0; c < models.size(); ++c) {
      const ParamInfo* t = tied.empty() ? nullptr : models[c]->table().try_find(tied);
      const bool first = models[c]->range().embeddings(), copy = t && !first;
      pipe.tied.push_back(t ? Range{t->offset, t->offset + t->numel} : Range{});
      pipe.norm_skip.push_back(copy ? pipe.tied.back() : Range{});
      holder |= t != nullptr;
    }
    if (tied.empty()) return;
    // Members: pp 0 and P - 1 (the first and last stage's ranks); ZeRO 0 one pair per dp x sp position.
    // Under tensor parallelism the copies pair up piece by piece: one group per tp rank.
    const int color = !holder ? -1
                              : (config.parallel.zero_stage == 0 ? replicas.rank() : 0) * grid.tp().size() +
                                    grid.tp().rank();
    embd = world.split(color, world.rank(), "embd", grid.num_nodes() == 1);
    if (embd) pipe.embd = embd.get();
  }

  bool root() const { return world.rank() == 0; }
  // What MPI's reductions hold while they run, counted with the communication buffers: one reduction
  // at a time on this thread, and one more on Domino's communication thread.
  uint64_t reduction_transient_bytes() const { return world.transient_bytes() * (tp_overlap ? 2 : 1); }
  int seq_len() const { return config.seq_len(); }
  // The GEMMs' padded-B scratch (kernels/gemm.h): a working buffer of the layers, counted with their
  // activations. The widest B is a linear layer's input: the MLP's hidden size or the model's width.
  uint64_t gemm_scratch_bytes() const {
    return odyssey::gemm_scratch_bytes(std::max(config.model.d_model, config.model.ffn_dim()));
  }

  // Before any activation is allocated: a sequence that cannot fit on this host is refused here.
  // memory.checkpoint = auto picks the first policy that fits, in order of speed (none, cheap,
  // keep_attention, full), and says which and why; nothing fitting is refused with full's numbers.
  HostMemoryNeed check_memory(uint64_t host_available, bool dry_run) {
    const TrainConfig& tc = config.train;
    HostMemoryNeed need;
    if (tc.steps == 0 && !dry_run) return need;
    uint64_t state_bytes = reduction_transient_bytes();
    for (auto& engine : engines) {
      const MemoryReport state = engine->memory();
      state_bytes += state.params + state.grads + state.optimizer + state.comm_buffers;
    }
    // A pipeline rank holds the activations of its schedule's peak in-flight micro-batch stages.
    const int in_flight = pipeline
                              ? validate_schedule(build_schedule(config.parallel.pp_schedule, shape), shape)
                                    .peak_in_flight[size_t(grid.coords().pp)]
                              : 1;
    auto need_for = [&](CheckpointPolicy policy) {
      HostMemoryNeed n;
      n.state_per_rank = state_bytes;
      n.tokens_per_rank = seq_len() / grid.sp().size();
      // zb1: a micro-batch between its I and W holds its weight GEMMs' operands instead of its
      // activations; the one being recorded holds both (parallel/pipeline.h).
      const bool zb1 = pipeline && config.parallel.pp_schedule == PipelineSchedule::zb1;
      size_t largest = 0, recorded = 0;
      uint64_t disk = 0;
      for (auto& model : models) {
        model->set_memory(memory_options(policy));
        largest = std::max(largest, model->activation_bytes_for(tc.micro_batch, n.tokens_per_rank));
        if (zb1)
          recorded = std::max(
              recorded, deferred_weight_grad_bytes_for(*model, int64_t(tc.micro_batch) * n.tokens_per_rank));
        disk += model->offload_bytes_for(tc.micro_batch, n.tokens_per_rank);
      }
      n.activations_per_rank =
          std::max(largest, recorded) * size_t(in_flight) + recorded + gemm_scratch_bytes();
      if (tp_overlap) {  // Domino's second reduction in flight: its partial sums (and TP-SP slice)
        const TpSplit split{grid.tp().size(), config.parallel.tp_sp, true};
        const int64_t half = int64_t(config.layer_chunk_rows()) * (split.sequence_parallel ? split.t : 1);
        n.activations_per_rank += TensorParallelLinears::overlap_bytes_for(half, config.model.d_model, split);
      }
      n.offload_per_rank = disk * uint64_t(in_flight);
      n.tier = enum_name(kMemoryTierNames, config.memory.tier);
      n.ranks_on_host = host_layout(world).local_size;
      n.seq_len = seq_len();
      n.micro_batch = tc.micro_batch;
      n.checkpoint = enum_name(kCheckpointPolicyNames, policy);
      this->policy = policy;
      return n;
    };
    if (config.memory.checkpoint != CheckpointPolicy::automatic) {
      need = need_for(config.memory.checkpoint);
    } else {
      std::string tried;
      // The disk tier holds what keep_attention and full keep: auto chooses between those two.
      std::vector<CheckpointPolicy> policies = {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                                CheckpointPolicy::keep_attention, CheckpointPolicy::full};
      if (config.memory.tier == MemoryTier::disk) policies.erase(policies.begin(), policies.begin() + 2);
      // Domino keeps both halves' token-local activations: the policies that keep them.
      if (config.parallel.tp_overlap == TpOverlap::domino) policies.resize(2);
      for (CheckpointPolicy policy : policies) {
        need = need_for(policy);
        const bool fits = fits_host_memory(need, tc.host_memory_gb, host_available);
        tried += fmt::format("{}{} {}", tried.empty() ? "" : ", ", need.checkpoint,
                             size(need.activations_per_rank));
        if (fits) break;
      }
      auto_note = fmt::format(
          "memory.checkpoint = auto: {} (activations per rank: {}; the first that fits, in order of speed)",
          need.checkpoint, tried);
    }
    check_host_memory(need, tc.host_memory_gb, host_available);
    if (need.offload_per_rank > 0)
      check_offload_disk(need, config.memory.disk_budget_gb, config.memory.offload_dir,
                         offload_dir_free_bytes(config.memory.offload_dir));
    return need;
  }

  // Data before anything is written: a bad shard is refused first.
  void open_data() {
    const TrainConfig& tc = config.train;
    const int T = seq_len(), V = config.model.vocab_size;
    if (tc.steps > 0)
      train_data = std::make_unique<TokenDataset>(config.data.train, T, V, config.data.shuffle, tc.seed);
    if (!config.data.val.empty())
      val_data = std::make_unique<TokenDataset>(config.data.val, T, V, false, tc.seed);
  }

  // Resumes from the newest checkpoint (any layout, read slice by slice, each rank taking what its ZeRO
  // stage keeps) or initialises what this rank keeps. Returns the step to start at.
  int64_t resume_or_init() {
    const TrainConfig& tc = config.train;
    const std::string latest = config.checkpoint.resume ? find_latest_checkpoint(config.checkpoint.dir) : "";
    if (latest.empty()) {
      // Only what each engine keeps is initialised: under ZeRO-3 the rest of the dense buffer stays
      // untouched zero pages, so a fresh start holds a 1/dp share of the parameters, like a resume.
      // A stage's tensors draw the whole model's values (init streams keyed by the tensor's index), so
      // every layout starts from the same weights.
      for (size_t c = 0; c < models.size(); ++c) {
        const ParamTable& table = models[c]->table();
        ZeroPages params(size_t(table.total()));
        for (const Range& r : engines[c]->param_ranges_loaded())
          arch.init(params.data(), table, config.model, tc.seed, r.begin, r.end);
        engines[c]->load(params.data());
      }
      return 0;
    }
    CheckpointState state = read_checkpoint_manifest(latest);
    check_same_model(config.model, state.model, latest);
    Timer load_timer;
    for (size_t c = 0; c < models.size(); ++c)
      state = load_sharded_checkpoint(latest, *engines[c], models[c]->table(), pipeline != nullptr);
    const double load_s = load_timer.seconds();
    ODY_CHECK(
        state.next_row == uint64_t(state.step) * uint64_t(tc.global_batch),
        "checkpoint {} was written with a different train.global_batch (data position {} after {} steps)",
        latest, state.next_row, state.step);
    if (root())
      log_info(
          "resumed from {} (step {}, written at world size {}, ZeRO stage {}, pp {}; loaded in {:.2f} s)",
          latest, state.step, state.layout.value("world_size", 0), state.layout.value("zero_stage", 0),
          state.layout.value("pp", 1), load_s);
    return state.step;
  }

  // Collective: every rank writes its own slices in parallel (sharded_checkpoint.h).
  std::string save(int64_t step, const LrSchedule& schedule) {
    const TrainConfig& tc = config.train;
    const ParallelConfig& pc = config.parallel;
    CheckpointState state;
    state.model = config.model;
    state.step = step;
    state.next_row = uint64_t(step) * uint64_t(tc.global_batch);
    state.seed = tc.seed;
    state.run = run_config_to_json(config);
    state.layout = {{"world_size", world.size()},
                    {"dp", dp.size()},
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
    if (!pipeline && !tp_linears)
      return save_sharded_checkpoint(replicas, engine(), model().table(), state, config.checkpoint.dir,
                                     config.checkpoint.keep);
    // Every stage writes its tensors (the tied copy once, by the first stage) and every tp rank its
    // pieces (a tensor several hold, once, by the first holder), as boxes of the global tensors.
    if (pipeline) {
      state.layout["pp_schedule"] = enum_name(kPipelineScheduleNames, pc.pp_schedule);
      state.layout["pp_virtual"] = pc.pp_virtual;
    }
    state.layout["tp_sp"] = pc.tp_sp;
    std::vector<CheckpointPart> parts;
    for (size_t c = 0; c < models.size(); ++c)
      parts.push_back({engines[c].get(), &models[c]->table(), pipeline ? pipe.norm_skip[c] : Range{}});
    return save_sharded_checkpoint(world, replicas, parts, ParamTable(config.model), state,
                                   config.checkpoint.dir, config.checkpoint.keep,
                                   tp_linears ? &grid.tp() : nullptr);
  }

  // Domino's layout (logged at start and by --dry-run); empty without it.
  std::string domino_note() const {
    if (!tp_overlap) return "";
    return fmt::format(
        "parallel.tp_overlap = domino: each layer in two halves of {} residual rows per rank (domino_split = "
        "{}), the tp reductions on a communication thread",
        config.layer_chunk_rows(), enum_name(kDominoSplitNames, config.parallel.domino_split));
  }

  void log_start(double gemm_gflops) const {
    const TrainConfig& tc = config.train;
    std::string layout = grid.describe();
    while (!layout.empty() && layout.back() == '\n') layout.pop_back();
    log_info("{}", layout);
    if (!auto_note.empty()) log_info("{}", auto_note);
    if (tp_overlap) log_info("{}", domino_note());
    log_info("model: {} layers, {} heads, d_model {}, context {}, vocab {}: {:.2f}M parameters",
             config.model.n_layer, config.model.n_head, config.model.d_model, config.model.seq_len,
             config.model.vocab_size, ParamTable(config.model).total() / 1e6);
    if (pipeline)
      log_info(
          "pipeline: {} stages over pp {} ({} schedule, {} stage(s) per rank, {} micro-batches): layers {}",
          ranges.size(), shape.P, enum_name(kPipelineScheduleNames, config.parallel.pp_schedule), shape.v,
          shape.m, describe_stage_layers(ranges));
    if (pipeline && shape.m < shape.P)
      log_info(
          "warning: {} micro-batches per step for {} pipeline ranks: the ranks idle (P-1)/(m+P-1) = {:.0f}% "
          "of the schedule; raise train.global_batch or lower train.micro_batch",
          shape.m, shape.P, 100.0 * (shape.P - 1) / (shape.m + shape.P - 1));
    log_info(
        "batch: {} rows x {} tokens per step ({} micro-steps of {} rows on each of {} data-parallel ranks), "
        "{} threads per rank; GEMM rate {:.1f} GFLOP/s per rank ({})",
        tc.global_batch, seq_len(), tc.global_batch / (tc.micro_batch * dp.size()), tc.micro_batch, dp.size(),
        omp_get_max_threads(), gemm_gflops, tc.gemm_gflops > 0 ? "train.gemm_gflops" : "measured");
    log_info(
        "ZeRO stage {}: {} sharded segments (gradient buckets; units for stage 3), {} padded parameters "
        "over {} ranks",
        config.parallel.zero_stage, engines.front()->partition().segments().size(),
        engines.front()->partition().padded_total(), engines.front()->partition().ranks());
  }
};

// Peak resident set size of this process and the largest over all ranks (collective).
std::pair<uint64_t, uint64_t> peak_rss(Communicator& world) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const uint64_t mine = uint64_t(usage.ru_maxrss) * 1024;
  std::vector<uint64_t> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), sizeof(uint64_t), DType::u8);
  return {mine, *std::max_element(all.begin(), all.end())};
}

// The pipeline's figures of a step, per pp rank (collective over pp): the time blocked in receives
// (the measured bubble), in compute, the schedule's run, the micro-batch stages held at once and their
// activation bytes; and the bubble fraction 1 - (compute summed over the ranks) / (P x the longest
// run), the spec's idle fraction (§3.8) measured.
nlohmann::json pipeline_metrics(Run& run, const StepResult& step, double step_ms) {
  Communicator& pp = run.grid.pp();
  const PipelineRunner& runner = *run.pipeline;
  // (and the compute time by action kind: F, B, I, W)
  const std::array<double, 4>& kind_s = runner.compute_seconds_by_kind();
  constexpr int kFigures = 9;
  double mine[kFigures] = {step.pp_wait_ms,
                           step.pp_compute_ms,
                           step.pp_run_ms,
                           double(runner.peak_in_flight()),
                           double(runner.peak_activation_bytes()),
                           1e3 * kind_s[0],
                           1e3 * kind_s[1],
                           1e3 * kind_s[2],
                           1e3 * kind_s[3]};
  std::vector<double> all(size_t(kFigures * pp.size()));
  pp.all_gather(mine, all.data(), kFigures * sizeof(double), DType::u8);
  nlohmann::json j = {{"schedule", enum_name(kPipelineScheduleNames, run.config.parallel.pp_schedule)},
                      {"P", run.shape.P},
                      {"v", run.shape.v},
                      {"m", run.shape.m}};
  double compute = 0, longest = 0;
  for (int r = 0; r < pp.size(); ++r) {
    const double* x = &all[size_t(kFigures * r)];
    j["wait_ms"].push_back(x[0]);
    j["compute_ms"].push_back(x[1]);
    j["run_ms"].push_back(x[2]);
    j["peak_in_flight"].push_back(int(x[3]));
    j["activation_bytes"].push_back(uint64_t(x[4]));
    j["action_ms"].push_back({{"F", x[5]}, {"B", x[6]}, {"I", x[7]}, {"W", x[8]}});
    compute += x[1];
    longest = std::max(longest, x[2]);
  }
  j["bubble_fraction"] = longest > 0 ? 1.0 - compute / (pp.size() * longest) : 0.0;
  j["bubble_unit_cost"] = runner.unit_cost_bubble();  // the action table's own, load-independent
  j["run_fraction_of_step"] = step_ms > 0 ? longest / step_ms : 0.0;
  return j;
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

}  // namespace

TrainResult run_training(const RunConfig& config, bool dry_run) {
  SingleCommunicator world("world");
  return run_training(config, world, dry_run);
}

TrainResult run_training(const RunConfig& config, Communicator& world, bool dry_run) {
  // Refused before any work, identically on every rank.
  config.validate(world.size());
  const TrainConfig& tc = config.train;
  // Cores per rank on this host unless train.threads or OMP_NUM_THREADS says otherwise (collective).
  const int host_threads = default_threads_per_rank(world);
  set_threads(tc.threads > 0 ? tc.threads : std::getenv("OMP_NUM_THREADS") ? 0 : host_threads);

  // What this host has before any rank allocates its model state, which the memory check counts with
  // the activations (train/memory_check.h): every rank reads it between the same two barriers.
  world.barrier();
  const uint64_t host_available = available_memory_bytes();
  world.barrier();
  // The buffers are mapped as the run is built (pages taken only when written); a budget above this
  // host's memory (train.host_memory_gb) can pass a model whose mappings the OS refuses.
  std::optional<Run> built;
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
  Run& run = *built;
  const bool root = run.root();
  const int T = run.seq_len();
  const HostMemoryNeed need = run.check_memory(host_available, dry_run);
  run.open_data();
  if (!dry_run) run.start_offload(need);
  if (dry_run) {
    if (root && !run.auto_note.empty()) log_info("{}", run.auto_note);
    if (root && run.tp_overlap) log_info("{}", run.domino_note());
    if (root) log_dry_run(need, config.parallel.zero_stage, tc.micro_batch, host_available);
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
  const int64_t start_step = run.resume_or_init();
  const LrSchedule schedule{tc.schedule, tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};

  const double flops_per_token = run.arch.training_flops_per_token(config.model, T);
  // The MFU denominator: the fp32 GEMM rate this machine achieves, or train.gemm_gflops (MFU comparable
  // across runs and hosts, and no 0.3 s of 1024^3 GEMMs on every rank at start). On a shared machine a
  // single measurement can land in a busy moment, so it is measured again at every validation and the
  // best rate seen is kept (MFU never rises above 1 because the first measurement was unlucky).
  const bool measure_gemm = tc.gemm_gflops == 0;
  double gemm_gflops = !measure_gemm ? tc.gemm_gflops : tc.steps > start_step ? measure_gemm_gflops() : 0.0;
  if (root) run.log_start(gemm_gflops);

  std::unique_ptr<MetricsWriter> metrics;
  if (root) metrics = std::make_unique<MetricsWriter>(config.metrics_path(), start_step > 0);
  TrainResult result;
  result.steps = start_step;
  // Without a pipeline, one micro-batch in flight: its activations, also used by validation (the
  // pipeline runner keeps its own).
  std::unique_ptr<StageActivations> acts = run.pipeline ? nullptr : run.model().make_activations();
  const int ranks = run.dp.size();
  std::unique_ptr<BatchLoader> train_rows, val_rows;
  if (run.train_data)
    train_rows = std::make_unique<BatchLoader>(*run.train_data, tc.global_batch, tc.micro_batch,
                                               run.dp.rank(), ranks, run.shard);
  if (run.val_data)
    val_rows = std::make_unique<BatchLoader>(*run.val_data, tc.global_batch, tc.micro_batch, run.dp.rank(),
                                             ranks, run.shard);
  const uint64_t val_row_count =
      run.val_data
          ? (tc.eval_rows > 0 ? std::min<uint64_t>(uint64_t(tc.eval_rows), run.val_data->rows_per_epoch())
                              : run.val_data->rows_per_epoch())
          : 0;
  auto validate = [&] {
    if (run.pipeline)
      return evaluate_pipeline(*run.pipeline, *val_rows, val_row_count, run.dp.rank(), ranks, run.replicas,
                               run.grid.pp());
    return evaluate_distributed(run.model(), *acts, *val_rows, val_row_count, run.dp.rank(), ranks,
                                run.replicas);
  };
  StepSettings step_settings;
  step_settings.micro_steps = tc.global_batch / (tc.micro_batch * ranks);
  step_settings.dloss = 1.0f / float(int64_t(tc.global_batch) * T);
  step_settings.grad_clip = tc.grad_clip;
  step_settings.tp = run.tp_grads.empty() || run.pipeline ? nullptr : &run.tp_grads.front();
  double total_tokens_per_s = 0;
  int64_t steps_run = 0;
  StopSignals stop_signals;
  int64_t end_step = tc.steps;
  if (tc.exit_after > 0 && tc.exit_after < end_step - start_step) end_step = start_step + tc.exit_after;

  for (int64_t step = start_step; step < end_step; ++step) {
    world.stats().reset();  // the metrics report this step's traffic
    Timer timer;
    const OffloadStats io_before = acts ? acts->offload() : OffloadStats{};
    const float lr = schedule.at(step);
    if (run.tp_overlap) run.tp_overlap->take_times();  // this step's collectives only
    const StepResult stepped = run.pipeline
                                   ? train_step(run.pipe, *train_rows, run.replicas, step_settings, step, lr)
                                   : train_step(run.model(), *acts, run.engine(), *train_rows, run.replicas,
                                                step_settings, step, lr);
    const double loss = stepped.loss, grad_norm = stepped.grad_norm;
    const double ms = timer.ms();
    const nlohmann::json comm = world.stats().to_json();
    const OverlapTimes overlap = run.tp_overlap ? run.tp_overlap->take_times() : OverlapTimes{};
    MemoryReport memory;
    memory.comm_buffers = run.reduction_transient_bytes();
    int64_t params = 0;
    CommTraffic traffic;
    for (size_t c = 0; c < run.engines.size(); ++c) {
      const MemoryReport m = run.engines[c]->memory();
      memory.params += m.params, memory.grads += m.grads, memory.optimizer += m.optimizer;
      memory.comm_buffers += m.comm_buffers;
      params += run.models[c]->table().total();
      const CommTraffic& t = run.engines[c]->traffic();
      traffic.weights_intra += t.weights_intra, traffic.weights_inter += t.weights_inter;
      traffic.grads_intra += t.grads_intra, traffic.grads_inter += t.grads_inter;
    }
    memory.activations = run.pipeline ? run.pipeline->peak_activation_bytes() + run.model().attention_bytes()
                                      : acts->bytes() + run.model().attention_bytes();
    memory.activations += run.gemm_scratch_bytes();
    // After `comm` is read, so these gathers are not counted in the step's traffic.
    const auto [peak_rss_mine, peak_rss_max] = peak_rss(world);
    const nlohmann::json pipeline_record =
        run.pipeline ? pipeline_metrics(run, stepped, ms) : nlohmann::json();
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
                             {"comm_bytes_per_param", traffic.per_param_json(params)},
                             {"memory", memory.to_json()},
                             {"peak_rss_bytes", peak_rss_mine},
                             {"peak_rss_bytes_max", peak_rss_max}};
    if (config.memory.tier == MemoryTier::disk && acts) {
      // This step's disk-tier traffic (the counters restart when the activations are re-sized).
      OffloadStats io = acts->offload();
      if (io.bytes_written >= io_before.bytes_written && io.bytes_read >= io_before.bytes_read)
        io.bytes_written -= io_before.bytes_written, io.bytes_read -= io_before.bytes_read,
            io.stall_seconds -= io_before.stall_seconds, io.bytes_read_late -= io_before.bytes_read_late;
      record["offload"] = {{"bytes_written", io.bytes_written},
                           {"bytes_read", io.bytes_read},
                           {"bytes_read_late", io.bytes_read_late},
                           {"stall_s", io.stall_seconds}};
    }
    if (run.tp_overlap) {
      // Domino (spec §9): the share of its tp reductions' time the compute did not wait for (rank 0's).
      record["tp_hidden_fraction"] = overlap.hidden_fraction();
      record["tp_overlap"] = {{"comm_ms", overlap.comm_seconds * 1e3},
                              {"wait_ms", overlap.wait_seconds * 1e3}};
    }
    if (!pipeline_record.is_null()) {
      record["pipeline"] = pipeline_record;
      record["pp_wait_ms"] = pipeline_record["wait_ms"];  // the spec's name (§9), per pp rank
    }
    const bool last = step + 1 == end_step;
    const bool eval_now = run.val_data && ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last);
    if (eval_now) {
      if (measure_gemm) gemm_gflops = std::max(gemm_gflops, measure_gemm_gflops(1024, 0.1));
      double val = validate();
      record["val_loss"] = val;
      result.val_loss = val;
    }
    if (root && ((step + 1) % config.log.every == 0 || last || eval_now)) metrics->write(record);
    if (root)
      log_info(
          "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}% "
          "| "
          "comm {:.2f} MB{}",
          step + 1, tc.steps, loss, eval_now ? fmt::format(" | val {:.4f}", double(record["val_loss"])) : "",
          lr, grad_norm, ms, tokens_per_s, 100 * mfu, double(comm["total_bytes"]) / 1e6,
          run.tp_overlap ? fmt::format(" | tp hidden {:.0f}%", 100 * overlap.hidden_fraction()) : "");
    if (config.checkpoint.every > 0 && (step + 1) % config.checkpoint.every == 0 && !last)
      run.save(step + 1, schedule);
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
  if (run.val_data && steps_run == 0) result.val_loss = validate();
  // A signal right after a periodic save does not write the same step twice.
  const std::string saved = fmt::format("{}/step_{:08d}", config.checkpoint.dir, result.steps);
  const bool just_saved =
      result.stopped_by_signal && config.checkpoint.every > 0 && result.steps % config.checkpoint.every == 0;
  result.checkpoint = just_saved ? saved : run.save(result.steps, schedule);
  if (root) log_info("checkpoint: {}", result.checkpoint);
  return result;
}

}  // namespace odyssey
