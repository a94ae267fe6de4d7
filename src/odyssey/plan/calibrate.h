// `odyssey plan --calibrate` (planner.md §7): measures this machine into a CPU cluster description —
// per-core GEMM rates of the model's shapes at several token counts, the attention kernel's FLOP rate,
// the memory bandwidth the memory-bound kernels reach, AdamW's seconds per parameter, and (under mpirun)
// the α and β of the collectives between this host's ranks. Every measured entry is marked so.
#pragma once

#include <string>

#include "odyssey/comm/communicator.h"
#include "odyssey/plan/cluster.h"
#include "odyssey/train/config.h"

namespace odyssey {

// Collective over world (one rank measures the kernels; all ranks the collectives). config: the model
// whose GEMM shapes are measured (its micro-batch x sequence shard at 1/4..4x); ranks_per_node: the
// ranks the description's node holds.
Cluster calibrate_host(const RunConfig& config, Communicator& world, int ranks_per_node);

}  // namespace odyssey
