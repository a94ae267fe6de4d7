// One layout builder: the config and the world to this rank's part of a run, in build order
// (torchtitan's build phase): the process grid; the layer ranges of every pipeline stage; this rank's
// stages of the registered architecture (pp = 1 is a one-stage pipeline: the whole model); the
// tensor-parallel ops; a ZeRO engine over each stage with the one optimizer; the sequence-parallel
// attention; the pipeline runner over the stages and the tied embedding's copies.
//
// Rows are split over dp, each row's sequence over sp. Weights are replicated over dp x sp, so their
// gradients are summed, and ZeRO shards, over dp_sp (= dp without sequence parallelism); stages differ
// over pp, tensor-parallel pieces over tp. So the trainer has one step, one evaluation and one save
// path whatever the layout (train/train_step.h, train/evaluate.h, train/run_checkpoint.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "odyssey/comm/comm_thread.h"
#include "odyssey/comm/grid.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/bf16_linears.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/parallel/pipeline.h"
#include "odyssey/parallel/sequence_shard.h"
#include "odyssey/parallel/tp_linear.h"
#include "odyssey/parallel/usp_attention.h"
#include "odyssey/parallel/vocab_parallel.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/config.h"
#include "odyssey/train/footprint.h"
#include "odyssey/train/offload_directory.h"
#include "odyssey/train/train_step.h"

namespace odyssey {

// The layer ranges of every stage: the whole model (pp = 1), or the pipeline's split
// (parallel.pp_layers or split_layers), stage s on pp rank s % pp as its chunk s / pp.
std::vector<std::pair<int, int>> stage_ranges(const RunConfig& config);

// The pipeline's shape and schedule: pp x pp_virtual stages, one micro-batch per micro-step. One stage
// runs 1F1B (one micro-batch in flight, each forward followed by its backward) whatever pp_schedule says.
PipelineShape pipeline_shape(const RunConfig& config, int dp);
PipelineSchedule pipeline_schedule(const RunConfig& config);

// The sequence-parallel attention's options on a tp rank of `tp` (the op the builder installs and the
// sizes the footprint counts).
SpAttentionOptions sp_attention_options(const RunConfig& config, int tp);

// ZeRO's view of the [parallel] and [comm] keys on this grid.
ZeroOptions zero_options(const RunConfig& config, ProcessGrid& grid);
// The dp x sp replicas on this rank's node.
int replicas_on_node(ProcessGrid& grid);

struct Layout {
  Layout(const RunConfig& config, Communicator& world);
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;

  const RunConfig& config;
  Communicator& world;
  ProcessGrid grid;
  const Architecture& arch;
  std::vector<std::pair<int, int>> ranges;     // every stage's layers
  std::vector<std::unique_ptr<Stage>> stages;  // this rank's stages (model chunks), in chunk order
  AdamW optimizer;
  std::vector<std::unique_ptr<ZeroEngine>> engines;  // one per stage, over its stage and the optimizer
  // Sequence parallelism (sp > 1): the attention across the sp groups; every rank trains on its shard.
  std::unique_ptr<SequenceParallelAttention> sp_attention;
  SequenceShard shard;
  // Tensor parallelism (tp > 1): the stages' linear and vocabulary ops over the tp group, the kv group
  // (replicated key/value heads), and Domino's communication thread (parallel.tp_overlap = domino).
  std::unique_ptr<CommThread> tp_overlap;
  std::unique_ptr<TensorParallelLinears> tp_linears;
  std::unique_ptr<VocabParallelOps> tp_vocab;
  std::unique_ptr<Communicator> kv_group;
  // train.precision = bf16: the stages' linears (the local or tensor-parallel ones) under the bf16 policy.
  std::unique_ptr<Bf16Linears> bf16_linears;
  // The pipeline over the stages (one stage when pp = 1) and the tied embedding's holders.
  PipelineShape shape;
  std::unique_ptr<PipelineRunner> runner;
  std::unique_ptr<Communicator> embd;
  PipelineStep step;                                 // what train_step runs
  CheckpointPolicy policy = CheckpointPolicy::none;  // memory.checkpoint, auto resolved (set_memory_policy)
  std::unique_ptr<OffloadDirectory> offload_dir;     // memory.tier = disk: this rank's (start_offload)

  Communicator& dp() { return grid.dp(); }
  Communicator& replicas() { return grid.dp_sp(); }  // the ranks holding disjoint tokens of a step
  bool root() const { return world.rank() == 0; }
  // This rank's place in the layout, as the footprint takes it (train/footprint.h).
  RankPlace place();
  // rank_footprint(config, place(), checkpoint), computed once per policy: the layout does not change,
  // and the live memory report asks it every step.
  const RankFootprint& footprint(CheckpointPolicy checkpoint);
  // The stages' memory options under a policy; the disk tier's files go to this rank's own directory
  // once it exists (start_offload), memory.offload_dir until then (only sized, never written).
  MemoryOptions memory_options(CheckpointPolicy checkpoint) const;
  // memory.checkpoint resolved (never auto): every stage keeps its activations by it.
  void set_memory_policy(CheckpointPolicy checkpoint);
  // memory.tier = disk: this rank's scratch directory, and the stages told to use it.
  void start_offload(uint64_t offload_per_rank);
  // What MPI's reductions hold while they run, from the built communicators (the live side of the
  // footprint's figure): one reduction at a time on this thread, Domino's and ZeRO's.
  uint64_t reduction_transient_bytes() const;
  // Domino's layout (logged at start and by --dry-run); empty without it.
  std::string domino_note() const;

 private:
  void build_pipeline();
  std::map<CheckpointPolicy, RankFootprint> footprints_;  // footprint()'s, by policy
};

}  // namespace odyssey
