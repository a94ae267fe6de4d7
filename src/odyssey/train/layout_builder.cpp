#include "odyssey/train/layout_builder.h"

#include <algorithm>

#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/core/host_memory.h"
#include "odyssey/core/log.h"
#include "odyssey/parallel/tp_grads.h"
#include "odyssey/train/memory_check.h"

namespace odyssey {

std::vector<std::pair<int, int>> stage_ranges(const RunConfig& c) {
  if (c.parallel.pp == 1) return {{0, c.model.n_layer}};
  return stage_layers(c.model.n_layer, c.parallel.pp * c.parallel.pp_virtual, c.parallel.pp_layers);
}

PipelineShape pipeline_shape(const RunConfig& c, int dp) {
  const int P = c.parallel.pp;
  return PipelineShape{P, P > 1 ? c.parallel.pp_virtual : 1,
                       c.train.global_batch / (c.train.micro_batch * dp)};
}

PipelineSchedule pipeline_schedule(const RunConfig& c) {
  return c.parallel.pp > 1 ? c.parallel.pp_schedule : PipelineSchedule::one_f_one_b;
}

int replicas_on_node(ProcessGrid& grid) {
  // dp ranks on my node (nodes hold consecutive dp ranks, as the grid lays them out).
  const std::vector<int>& node = grid.members(GridGroup::intra_node);
  int local = 0;
  for (int r : grid.members(GridGroup::dp_sp)) local += std::count(node.begin(), node.end(), r) > 0;
  return local;
}

SpAttentionOptions sp_attention_options(const RunConfig& c, int tp) {
  SpAttentionOptions so;
  so.layout = c.parallel.sp_ring_layout;
  // The key/value heads of this tp rank (its share, or the one it holds when they are replicated).
  so.n_kv_head = c.model.kv_heads() % tp == 0 ? c.model.kv_heads() / tp : 1;
  // Query-chunked Ulysses deals the ranks' tokens by chunk; TP-SP runs the attention whole
  // (model/query_chunks.h).
  so.chunk_tokens = tp > 1 && c.parallel.tp_sp ? 0 : c.memory.chunk_tokens;
  so.bf16_wire = c.train.precision == Precision::bf16;
  return so;
}

ZeroOptions zero_options(const RunConfig& config, ProcessGrid& grid) {
  ZeroOptions zo = zero_options(config);
  const int local = replicas_on_node(grid);
  zo.comm.ranks_per_node = local;
  zo.comm_thread =
      zero_comm_thread(config.comm.overlap_thread, grid.dp_sp().size(), local, runtime_thread_multiple());
  return zo;
}

namespace {

// A model too large for the host is refused before its allocation fails (also under --dry-run). A
// pipeline rank holds only its stages, a tensor-parallel rank its pieces: the check takes the largest
// rank's share (the same on every rank, so all refuse alike).
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

}  // namespace

Layout::Layout(const RunConfig& c, Communicator& w)
    : config(c),
      world(w),
      grid(w, GridDims{c.parallel.tp, c.parallel.sp_ulysses, c.parallel.sp_ring, c.parallel.dp, c.parallel.pp,
                       c.parallel.ranks_per_node}),
      arch(architecture(c.model.arch)),
      ranges(stage_ranges(c)),
      optimizer(AdamWConfig{c.train.lr, c.train.beta1, c.train.beta2, c.train.eps, c.train.weight_decay}),
      shape(pipeline_shape(c, grid.dp().size())) {
  check_model_fits(c, arch, ranges, replicas().size(), w);
  if (c.comm.overlap_thread != OverlapThread::off && !runtime_thread_multiple() && replicas().size() > 1) {
    ODY_CHECK(
        c.comm.overlap_thread != OverlapThread::on,
        "comm.overlap_thread = on runs ZeRO's collectives on a communication thread, which needs an MPI "
        "library with MPI_THREAD_MULTIPLE (this one does not provide it); use auto or off");
    if (root() && zero_options(c, grid).comm.ranks_per_node < replicas().size())
      log_info(
          "comm.overlap_thread = auto: MPI does not provide MPI_THREAD_MULTIPLE, so ZeRO's gathers and "
          "reductions stay on the main thread (they progress only inside MPI calls, not during compute)");
  }
  Communicator& tp = grid.tp();
  if (tp.size() > 1) {
    if (c.parallel.tp_overlap == TpOverlap::domino) {
      // A duplicate of the tp group, used by the communication thread alone (its bytes count as tp's).
      ODY_CHECK(runtime_thread_multiple(),
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
  // bf16: the stages' linears (local or tensor-parallel) under the bf16 policy (model/bf16_linears.h).
  // One rank's linears run gemm_bf16 where ODYSSEY_BF16_GEMM says native (bf16_gemm_scratch: their
  // scratch, as the footprint counts it).
  if (c.train.precision == Precision::bf16) {
    std::vector<StageRange> mine;
    for (int chunk = 0; chunk < shape.v; ++chunk) {
      const auto [begin, end] = ranges[size_t(chunk * shape.P + grid.coords().pp)];
      mine.push_back(StageRange{begin, end}.resolved(c.model));
    }
    const Bf16GemmScratch scratch = bf16_gemm_scratch(c, mine);
    bf16_linears = std::make_unique<Bf16Linears>(tp_linears ? *tp_linears : local_linears(),
                                                 scratch.bytes() > 0, scratch);
  }
  for (int chunk = 0; chunk < shape.v; ++chunk) {
    const auto [begin, end] = ranges[size_t(chunk * shape.P + grid.coords().pp)];
    stages.push_back(arch.make_stage(c.model, StageRange{begin, end}, false, TpPiece{tp.size(), tp.rank()}));
    if (bf16_linears)
      stages.back()->set_tensor_parallel(bf16_linears.get(), tp_vocab ? tp_vocab.get() : &local_vocab());
    if (tp.size() > 1) {
      if (!bf16_linears) stages.back()->set_tensor_parallel(tp_linears.get(), tp_vocab.get());
      step.tp.push_back(TpGradients::plan(stages.back()->table(), tp, kv_group.get(), c.parallel.tp_sp));
    }
  }
  // memory.checkpoint = auto is resolved by the memory check (set_memory_policy); until then the
  // stages keep everything.
  const bool automatic = c.memory.checkpoint == CheckpointPolicy::automatic;
  policy = automatic ? CheckpointPolicy::none : c.memory.checkpoint;
  for (auto& stage : stages) {
    MemoryOptions until_resolved{CheckpointPolicy::none, c.memory.head_chunk_tokens, c.layer_chunk_rows()};
    until_resolved.bf16 = c.train.precision == Precision::bf16;
    stage->set_memory(automatic ? until_resolved : memory_options(c.memory.checkpoint));
    engines.push_back(std::make_unique<ZeroEngine>(*stage, replicas(), zero_options(c, grid), optimizer));
  }
  if (grid.sp().size() > 1) {
    sp_attention = std::make_unique<SequenceParallelAttention>(grid.sp_ulysses(), grid.sp_ring(),
                                                               sp_attention_options(c, tp.size()));
    for (auto& stage : stages) stage->set_attention(sp_attention.get());
    shard = sp_attention->shard();
  }
  build_pipeline();
}

// The runner over this rank's stages, and the tied embedding: a stage with the head but not the
// embeddings holds a copy of an embeddings-unit tensor; its gradient is summed with the first stage's
// over `embd` (ZeRO 0: the pair with my dp x sp coordinates; ZeRO >= 1: both stages' whole dp x sp
// groups, each rank its shard), and the norm counts it on the first stage only. One stage holds both
// ends: no copy. The pipeline group takes part in the step's sums only when there is more than one
// pp rank (a group of one would add calls and change no number).
void Layout::build_pipeline() {
  std::vector<Stage*> chunks;
  for (auto& stage : stages) chunks.push_back(stage.get());
  runner = std::make_unique<PipelineRunner>(grid.pp(), chunks, shape, pipeline_schedule(config));
  step.runner = runner.get();
  step.pp = shape.P > 1 ? &grid.pp() : nullptr;
  for (auto& engine : engines) step.engines.push_back(engine.get());
  runner->set_engines(step.engines);
  // The tied tensor's name: in the last stage's table, from the whole model's embeddings unit.
  std::string tied;
  if (ranges.size() > 1) {
    const ParamTable whole(config.model);
    const auto [lb, le] = ranges.back();
    const ParamTable last = arch.make_stage(config.model, StageRange{lb, le}, false, {})->table();
    for (const ParamInfo& t : last.tensors())
      if (whole.find(t.name).unit == 0) tied = t.name;
  }
  bool holder = false;
  for (auto& stage : stages) {
    const ParamInfo* t = tied.empty() ? nullptr : stage->table().try_find(tied);
    const bool copy = t && !stage->range().embeddings();
    step.tied.push_back(t ? Range{t->offset, t->offset + t->numel} : Range{});
    step.norm_skip.push_back(copy ? step.tied.back() : Range{});
    holder |= t != nullptr;
  }
  if (tied.empty()) return;
  // Members: pp 0 and P - 1 (the first and last stage's ranks); ZeRO 0 one pair per dp x sp position.
  // Under tensor parallelism the copies pair up piece by piece: one group per tp rank.
  const int color = !holder ? -1
                            : (config.parallel.zero_stage == 0 ? replicas().rank() : 0) * grid.tp().size() +
                                  grid.tp().rank();
  embd = world.split(color, world.rank(), "embd", grid.num_nodes() == 1);
  if (embd) step.embd = embd.get();
}

MemoryOptions Layout::memory_options(CheckpointPolicy checkpoint) const {
  const MemoryConfig& m = config.memory;
  return MemoryOptions{checkpoint,
                       m.head_chunk_tokens,
                       config.layer_chunk_rows(),
                       m.tier,
                       offload_dir ? offload_dir->path() : m.offload_dir,
                       config.train.precision == Precision::bf16};
}

void Layout::set_memory_policy(CheckpointPolicy checkpoint) {
  policy = checkpoint;
  for (auto& stage : stages) stage->set_memory(memory_options(policy));
}

void Layout::start_offload(uint64_t offload_per_rank) {
  if (config.memory.tier != MemoryTier::disk || !keeps_layer_inputs(policy)) return;
  offload_dir = std::make_unique<OffloadDirectory>(config.memory.offload_dir, world.rank());
  set_memory_policy(policy);
  if (root())
    log_info("memory.tier = disk: {} of layer inputs per rank in {} (rank 0's scratch directory)",
             size(offload_per_rank), offload_dir->path());
}

RankPlace Layout::place() {
  return RankPlace{grid.coords().pp, grid.coords().tp, replicas().rank(), replicas().size(),
                   replicas_on_node(grid)};
}

const RankFootprint& Layout::footprint(CheckpointPolicy checkpoint) {
  auto it = footprints_.find(checkpoint);
  if (it == footprints_.end())
    it = footprints_.emplace(checkpoint, rank_footprint(config, place(), checkpoint)).first;
  return it->second;
}

uint64_t Layout::reduction_transient_bytes() const {
  // One reduction at a time per thread that runs them: the main one, Domino's, ZeRO's.
  const bool dp_thread = !engines.empty() && engines.front()->comm_thread();
  return world.transient_bytes() * (1 + (tp_overlap ? 1 : 0) + (dp_thread ? 1 : 0));
}

std::string Layout::domino_note() const {
  if (!tp_overlap) return "";
  return fmt::format(
      "parallel.tp_overlap = domino: each layer in two halves of {} residual rows per rank (domino_split = "
      "{}), the tp reductions on a communication thread",
      config.layer_chunk_rows(), enum_name(kDominoSplitNames, config.parallel.domino_split));
}

}  // namespace odyssey
