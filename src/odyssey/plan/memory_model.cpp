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

CheckpointPolicy planned_policy(const RunConfig& config) {
  return config.memory.checkpoint == CheckpointPolicy::automatic ? auto_checkpoint_candidates(config).front()
                                                                 : config.memory.checkpoint;
}

PlanBuffers activation_and_buffer_bytes(const PlanLayout& layout, int rank) {
  const RunConfig& c = layout.config();
  const GridCoords me = layout.coords(rank);
  const PlanGroup replicas = layout.group(GridGroup::dp_sp, rank);
  const PlanGroup node = layout.group(GridGroup::intra_node, rank);
  int on_node = 0;
  for (int r : replicas.members)
    on_node += std::count(node.members.begin(), node.members.end(), r) > 0 ? 1 : 0;
  const RankFootprint f = rank_footprint(
      c, RankPlace{me.pp, me.tp, replicas.rank_of(rank), replicas.size(), on_node}, planned_policy(c));
  return PlanBuffers{f.activations, f.comm_buffers};
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
  // The footprint equals the engine's allocation byte for byte (tests/train/mpitest_footprint.cpp).
  m.exact = true;
  return m;
}

}  // namespace odyssey
