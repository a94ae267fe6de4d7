// What a rank holds, as a pure function of the config and its place in the layout: no MPI, no
// allocation, no stage or engine built. Today it gives the model state (parameters, gradients,
// optimizer moments) of every rank, equal byte for byte to what the ZeRO engines allocate (the live
// accounting, MemoryReport) and used by the start-up check; activations, communication buffers and
// the disk tier are still sized from the built stages (train/memory_plan.h).
//
// The state is offset arithmetic over the stage's parameter table (DESIGN: flat buffers with a named
// table): ZeRO's partition (parallel/shard.h) of the table's buckets (stages 0-2) or units (stage 3)
// over the dp x sp replicas, padded per segment to a multiple of them (32 under quantized comm).
#pragma once

#include <cstdint>
#include <vector>

#include "odyssey/model/params.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/config.h"

namespace odyssey {

// One rank's bytes by kind.
struct StateBytes {
  uint64_t params = 0;     // the weights the model computes with (+ the master shard under comm.weights)
  uint64_t grads = 0;      // the gradient buffer (ZeRO 0-1) and the reduced shard (ZeRO >= 1)
  uint64_t optimizer = 0;  // the optimizer's moments over this rank's elements
  uint64_t total() const { return params + grads + optimizer; }
};

// Where a rank sits: its pipeline and tensor-parallel coordinates, and its place among the replicas.
struct RankPlace {
  int pp = 0, tp = 0;
  int replica = 0;   // rank in dp x sp
  int replicas = 0;  // dp x sp (0: parallel.dp x sp_ulysses x sp_ring of the config, dp given)
};

// ZeRO's view of the [parallel] and [comm] keys (the nodes' split, comm.ranks_per_node, comes from the
// grid: zero_options(config, grid), train/layout_builder.h).
ZeroOptions zero_options(const RunConfig& config);

// The state a ZeRO engine with `options` over `replicas` ranks allocates for a stage with `table`, on
// replica rank `rank`; optimizer_states: buffers the optimizer keeps per element (AdamW: 2).
StateBytes engine_state_bytes(const ParamTable& table, const ZeroOptions& options, int replicas, int rank,
                              int optimizer_states);

// The state of the rank at `place` of the run `config` (its stages' tables from the registered
// architecture, cut for its tp piece).
StateBytes rank_state_bytes(const RunConfig& config, const RankPlace& place);

// The most any rank of the layout on world_size ranks holds (parallel.dp 0: derived from it), over its
// pp x tp places (every replica's shard is the same size: segments are padded to a multiple of them).
// `odyssey train --dry-run --world-size N` prints it without building the layout.
StateBytes max_rank_state_bytes(const RunConfig& config, int world_size);

}  // namespace odyssey
