#include "odyssey/plan/memory_model.h"

#include <algorithm>

#include "odyssey/kernels/gemm.h"
#include "odyssey/model/architecture.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/plan/stage_cache.h"
#include "odyssey/train/footprint.h"

namespace odyssey {

nlohmann::json PlanMemory::to_json() const {
  return {{"params", params},
          {"grads", grads},
          {"optimizer", optimizer},
          {"activations", activations},
          {"comm_buffers", comm_buffers},
          {"total", total()},
          {"state_exact", state_exact},
          {"exact", exact}};
}

uint64_t memory_limit(const Cluster& cluster) {
  return uint64_t(cluster.memory_gib * double(uint64_t(1) << 30) * (1.0 - cluster.memory_reserve));
}

namespace {

// This rank's stages, as the layout builder makes them (one per virtual pipeline chunk).
std::vector<const Stage*> rank_stages(const PlanLayout& layout, int rank) {
  const RunConfig& c = layout.config();
  const GridCoords me = layout.coords(rank);
  const int P = c.parallel.pp, v = P > 1 ? c.parallel.pp_virtual : 1;
  const auto ranges = P == 1 ? std::vector<std::pair<int, int>>{{0, c.model.n_layer}}
                             : stage_layers(c.model.n_layer, P * v, c.parallel.pp_layers);
  std::vector<const Stage*> stages;
  for (int chunk = 0; chunk < v; ++chunk) {
    const auto [begin, end] = ranges[size_t(chunk * P + me.pp)];
    stages.push_back(&planned_stage(c.model, StageRange{begin, end}, TpPiece{c.parallel.tp, me.tp}));
  }
  return stages;
}

}  // namespace

StateBytes planned_state_bytes(const PlanLayout& layout, int rank) {
  const PlanGroup replicas = layout.group(GridGroup::dp_sp, rank);
  constexpr int kAdamWStates = 2;  // m and v
  StateBytes total;
  for (const Stage* stage : rank_stages(layout, rank)) {
    const StateBytes s = planned_engine_state_bytes(stage->table(), zero_options(layout.config()),
                                                    replicas.size(), replicas.rank_of(rank), kAdamWStates);
    total.params += s.params, total.grads += s.grads, total.optimizer += s.optimizer;
  }
  return total;
}

PlanBuffers activation_and_buffer_bytes(const PlanLayout& layout, int rank) {
  const RunConfig& c = layout.config();
  const int pp = c.parallel.pp, zero = c.parallel.zero_stage;
  const Stage* stage = rank_stages(layout, rank).front();
  const ParamTable& table = stage->table();
  const PlanGroup dp = layout.group(GridGroup::dp_sp, rank);
  CommOptions comm;
  comm.weights = c.comm.weights;
  comm.grads = c.comm.grads;
  comm.hpz = c.comm.hpz;
  const int P = zero > 0 ? dp.size() : 1;
  const int64_t bucket_bytes = zero == 3 ? 0 : int64_t(c.parallel.bucket_mb * 1e6);
  const Partition& part =
      planned_partition(table, bucket_bytes, P, zero > 0 ? dp.rank_of(rank) : 0, comm_shard_align(comm));
  PlanBuffers b;
  // Peaks of the buffers in flight: two gathered units (stage 3), two pooled buckets (stages 2-3).
  std::vector<int64_t> segs;
  for (const Partition::Segment& s : part.segments()) segs.push_back(s.layout.padded * 4);
  std::sort(segs.rbegin(), segs.rend());
  const uint64_t two = uint64_t(segs.size() > 0 ? segs[0] : 0) + uint64_t(segs.size() > 1 ? segs[1] : 0);
  b.comm_buffers = (zero == 3 ? two : 0) + (zero >= 2 ? two : 0);
  // Activations of one micro-batch of this rank's sequence shard, as the stage sizes them, plus the GEMMs'
  // padded-B scratch.
  const CheckpointPolicy policy =
      c.memory.checkpoint == CheckpointPolicy::automatic ? CheckpointPolicy::none : c.memory.checkpoint;
  Stage& sized = const_cast<Stage&>(*stage);  // set_memory only chooses what activation_bytes_for sizes
  sized.set_memory(MemoryOptions{policy, c.memory.head_chunk_tokens, c.layer_chunk_rows()});
  const int in_flight = pp > 1 ? pp - layout.coords(rank).pp : 1;  // 1F1B: stage i holds p - i micro-batches
  b.activations = uint64_t(stage->activation_bytes_for(c.train.micro_batch, layout.local_tokens())) *
                      uint64_t(in_flight) +
                  gemm_scratch_bytes(std::max(c.model.d_model, c.model.ffn_dim()));
  return b;
}

PlanMemory plan_memory(const PlanLayout& layout, int rank) {
  const StateBytes state = planned_state_bytes(layout, rank);
  const PlanBuffers buffers = activation_and_buffer_bytes(layout, rank);
  PlanMemory m;
  m.params = state.params;
  m.grads = state.grads;
  m.optimizer = state.optimizer;
  m.activations = buffers.activations;
  m.comm_buffers = buffers.comm_buffers;
  m.state_exact = true;
  m.exact = false;
  return m;
}

}  // namespace odyssey
