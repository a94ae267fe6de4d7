// Saving and loading a ZeroEngine's state as a universal checkpoint (checkpoint/sliced.h): each
// data-parallel rank writes what it owns, in parallel, and reads back only what its stage keeps, so a
// checkpoint written under one layout resumes under any other.
#pragma once

#include <string>
#include <vector>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/sliced.h"
#include "odyssey/comm/communicator.h"
#include "odyssey/parallel/zero.h"

namespace odyssey {

// Collective over dp. Every rank writes params, m and v for the elements it owns (ZeRO >= 1: its
// shard; ZeRO-0: an equal 1/dp share of the replicated state), and under ZeRO 1-2 with quantized
// weight communication the same slice of the model-weight replica ("weights"), into the temporary
// directory; after a barrier rank 0 writes the manifest, renames and applies retention (keep).
// Returns the directory.
// ODYSSEY_CHECKPOINT_PAUSE_MS=n makes every writer sleep n ms before each file and rank 0 before the
// manifest, so tests can kill a run mid-save.
std::string save_sharded_checkpoint(Communicator& dp, const ZeroEngine& engine, const ParamTable& table,
                                    const CheckpointState& state, const std::string& run_dir, int keep);

// What one engine of a rank writes: a pipeline rank holds one per stage (model chunk).
struct CheckpointPart {
  const ZeroEngine* engine = nullptr;
  const ParamTable* table = nullptr;  // the stage's
  Range skip;                         // dense elements not written (a tied copy the first stage writes)
};
// The same over every rank of `writers` (the world), each writing its parts (every rank as many);
// dp is the group over which each part's state is replicated or sharded (ZeRO-0 writes a 1/dp share);
// model: the whole model's table, which the manifest lists. Collective over writers.
// tp: under tensor parallelism, the tp group; the parts' tables are cut for its rank
// (ParamTable::tensor_parallel(tp->size(), tp->rank()); model stays the uncut table). Each rank writes
// boxes of its shards, and a tensor replicated over tp is written by its first holder only
// (checkpoint/sliced.h), after check_tp_replicas has asserted the holders' master weights equal.
std::string save_sharded_checkpoint(Communicator& writers, Communicator& dp,
                                    const std::vector<CheckpointPart>& parts, const ParamTable& model,
                                    const CheckpointState& state, const std::string& run_dir, int keep,
                                    Communicator* tp = nullptr);

// Collective over tp (a table cut by tensor_parallel(tp.size(), tp.rank()); every tp rank passes the
// same dense ranges, as its ZeRO partition is the same): asserts that the tensors several tp ranks
// hold (replicated ones, and kv heads replicated over t/K ranks) are bit-identical on every holder
// within the pieces (spec §1.9), since only the first holder writes them. On a difference every rank
// fails alike, naming the tensor and the two tp ranks.
void check_tp_replicas(Communicator& tp, const ParamTable& table, const std::vector<DenseRange>& pieces);

// Not collective: reads the checkpoint's slices this rank's stage keeps (any format, any writing
// layout; table may be cut by tensor_parallel) and loads them into the engine. Moments absent from a
// weights-only checkpoint start at zero. A saved model-weight replica is restored when the engine's
// replica_layout() matches the writer's (bit-exact resume); otherwise it is rebuilt from the master weights,
// logged on rank 0. The engine's rounding-key step is set to the checkpoint's step. part: table is a pipeline
// stage's (a part of the checkpoint's model; a tied copy reads the one stored tensor).
CheckpointState load_sharded_checkpoint(const std::string& dir, ZeroEngine& engine, const ParamTable& table,
                                        bool part = false);

}  // namespace odyssey
