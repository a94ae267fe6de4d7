// What a rank holds, as a pure function of the config, its place in the layout and the memory policy:
// no MPI, no allocation, no stage, engine or op built. It is the one source of the live memory report
// (train/step_metrics.h), the start-up check and memory.checkpoint = auto (train/memory_plan.h),
// `odyssey train --dry-run --world-size N` and the planner (plan/memory_model.h). Every figure is bytes
// = elements x the element's dtype size.
//
// - state: offset arithmetic over the stage's parameter table (DESIGN: flat buffers with a named table):
//   ZeRO's partition (parallel/shard.h) of the table's buckets (stages 0-2) or units (stage 3) over the
//   dp x sp replicas, padded per segment to a multiple of them (32 under quantized comm);
// - activations: each of the rank's stages sized from its architecture's block description
//   (block_stage_memory, model/block_stage.h) under the policy, row and query chunks, the tensor-parallel
//   split and the sequence-parallel attention's sizes (SpAttentionSizes, parallel/usp_attention.h); the
//   pipeline's action table of this rank replayed as the runner holds them (micro-batch stages in
//   flight with their received hidden states and gradients, zb1's deferred weight-GEMM operands), plus
//   the attention op's scratch (with its bf16 messages), the GEMMs' scratch, the tensor-parallel
//   linears' (TP-SP's gathered inputs and partial sums, Domino's second slot) and the vocabulary-parallel
//   ops' (the embedding's token sums under TP-SP, the cross-entropy's statistics);
// - communication buffers: each engine's hooks replayed over the same table: ZeRO-3's gathered units
//   with their gathers' wire buffers (qwZ, bf16) and hpZ's secondary shards (prefetch and release
//   follow the stage's unit schedule), the pooled gradient buckets with their receive scratch (ZeRO 2-3:
//   a reduction's buffers go when the engine must wait for it, as GradSync releases them), the most one
//   compressed or bf16 collective holds (ZeroCommSizes, parallel/zero.h), the packing scratch of the
//   step's gradient sums (tensor parallelism's replicated tensors and key/value heads, the tied
//   embedding's copies), plus what MPI's reductions hold while they run;
// - offload: the disk tier's file of each activation set the runner keeps.
#pragma once

#include <cstdint>
#include <vector>

#include "odyssey/model/bf16_linears.h"
#include "odyssey/model/params.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/config.h"

namespace odyssey {

// One rank's model state by kind.
struct StateBytes {
  uint64_t params = 0;     // the weights the model computes with (+ the master shard under comm.weights)
  uint64_t grads = 0;      // the gradient buffer (ZeRO 0-1) and the reduced shard (ZeRO >= 1)
  uint64_t optimizer = 0;  // the optimizer's moments over this rank's elements
  uint64_t total() const { return params + grads + optimizer; }
};

// Where a rank sits: its pipeline and tensor-parallel coordinates, and its place among the replicas.
struct RankPlace {
  int pp = 0, tp = 0;
  int replica = 0;           // rank in dp x sp
  int replicas = 0;          // dp x sp (0: parallel.dp x sp_ulysses x sp_ring of the config, dp given)
  int replicas_on_node = 0;  // of them on this rank's node (0: all, one node)
};

// Whether ZeRO runs its collectives on a communication thread (comm.overlap_thread; auto: when the
// replicas span nodes and MPI lets a second thread call it). The layout builder and the footprint (one
// more reduction transient in flight) both ask this.
bool zero_comm_thread(OverlapThread mode, int replicas, int replicas_on_node, bool thread_multiple);

// Everything one rank holds.
struct RankFootprint {
  StateBytes state;
  uint64_t activations = 0;     // peak of the step's activations and their working buffers
  uint64_t comm_buffers = 0;    // peak of the engines' buffers, and the reductions' transient
  uint64_t gathered_units = 0;  // of comm_buffers: the peak of ZeRO-3's gathered units (with their
                                // gathers' wire buffers) and hpZ's secondary shards
  uint64_t offload = 0;         // memory.tier = disk: the scratch files (on disk, not in RAM)
  uint64_t ram() const { return state.total() + activations + comm_buffers; }
};

// ZeRO's view of the [parallel] and [comm] keys (the nodes' split, comm.ranks_per_node, comes from the
// grid: zero_options(config, grid), train/layout_builder.h).
ZeroOptions zero_options(const RunConfig& config);

// The state a ZeRO engine with `options` over `replicas` ranks allocates for a stage with `table`, on
// replica rank `rank`; optimizer_states: buffers the optimizer keeps per element (AdamW: 2).
StateBytes engine_state_bytes(const ParamTable& table, const ZeroOptions& options, int replicas, int rank,
                              int optimizer_states);

// The bf16 linears' GEMM scratch on a rank whose stages span `ranges` (resolved): Bf16GemmScratch::of
// its blocks over a micro-batch's tokens, with the vocabulary when a range has the head; none unless
// train.precision = bf16 runs native GEMMs (bf16_gemm_mode) on one tensor-parallel rank.
Bf16GemmScratch bf16_gemm_scratch(const RunConfig& config, const std::vector<StageRange>& ranges);

// The state of the rank at `place` of the run `config` (its stages' tables from the registered
// architecture, cut for its tp piece).
StateBytes rank_state_bytes(const RunConfig& config, const RankPlace& place);

// Everything the rank at `place` holds during a training step with activations kept by `policy` (never
// auto; memory.checkpoint itself is not read). The config is validated (RunConfig::validate).
RankFootprint rank_footprint(const RunConfig& config, const RankPlace& place, CheckpointPolicy policy);

// The most any rank of the layout on world_size ranks holds (parallel.dp 0: derived from it), over its
// pp x tp places (every replica's shard is the same size: segments are padded to a multiple of them),
// by RAM. `odyssey train --dry-run --world-size N` prints it without building the layout.
RankFootprint max_rank_footprint(const RunConfig& config, int world_size, CheckpointPolicy policy);

// The policies memory.checkpoint = auto tries, fastest first: none, cheap, keep_attention, full (the disk
// tier holds what keep_attention and full keep: those two; Domino keeps both halves' token-local
// activations: none and cheap).
std::vector<CheckpointPolicy> auto_checkpoint_candidates(const RunConfig& config);

}  // namespace odyssey
