#include "odyssey/plan/memory_model.h"

#include <algorithm>

#include "odyssey/kernels/gemm.h"
#include "odyssey/model/architecture.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/plan/stage_cache.h"

namespace odyssey {

nlohmann::json PlanMemory::to_json() const {
  return {{"params", params},
          {"grads", grads},
          {"optimizer", optimizer},
          {"activations", activations},
          {"comm_buffers", comm_buffers},
          {"total", total()},
          {"exact", exact}};
}

uint64_t memory_limit(const Cluster& cluster) {
  return uint64_t(cluster.memory_gib * double(uint64_t(1) << 30) * (1.0 - cluster.memory_reserve));
}

PlanMemory plan_memory(const PlanLayout& layout, int rank) {
  const RunConfig& c = layout.config();
  const int pp = c.parallel.pp, zero = c.parallel.zero_stage;
  const auto [begin, end] =
      pp == 1 ? std::pair{0, c.model.n_layer}
              : stage_layers(c.model.n_layer, pp, c.parallel.pp_layers)[size_t(layout.coords(rank).pp)];
  auto stage =
      &planned_stage(c.model, StageRange{begin, end}, TpPiece{c.parallel.tp, layout.coords(rank).tp});
  const ParamTable& table = stage->table();
  const PlanGroup dp = layout.group(GridGroup::dp_sp, rank);
  CommOptions comm;
  comm.weights = c.comm.weights;
  comm.grads = c.comm.grads;
  comm.hpz = c.comm.hpz;
  const int P = zero > 0 ? dp.size() : 1;
  const int64_t bucket_bytes = zero == 3 ? 0 : int64_t(c.parallel.bucket_mb * 1e6);
  const Partition part(table, build_buckets(table, bucket_bytes), P, zero > 0 ? dp.rank_of(rank) : 0,
                       comm_shard_align(comm));
  const uint64_t padded = uint64_t(part.padded_total()) * 4, local = uint64_t(part.local_total()) * 4;
  PlanMemory m;
  // ZeroEngine::memory(): the parameters (stage 3: the shard), a separate master shard under comm.weights
  // (stages 1-2), the gradient buffers (stages 0-1 full, >= 1 the shard), AdamW's two moments.
  m.params = (zero == 3 ? local : padded) +
             ((zero == 1 || zero == 2) && comm.weights != WeightComm::none ? local : 0);
  m.grads = (zero <= 1 ? padded : 0) + (zero >= 1 ? local : 0);
  m.optimizer = 2 * local;
  // Peaks of the buffers in flight: two gathered units (stage 3), two pooled buckets (stages 2-3).
  std::vector<int64_t> segs;
  for (const Partition::Segment& s : part.segments()) segs.push_back(s.layout.padded * 4);
  std::sort(segs.rbegin(), segs.rend());
  const uint64_t two = uint64_t(segs.size() > 0 ? segs[0] : 0) + uint64_t(segs.size() > 1 ? segs[1] : 0);
  m.comm_buffers = (zero == 3 ? two : 0) + (zero >= 2 ? two : 0);
  // Activations of one micro-batch of this rank's sequence shard, as the stage sizes them, plus the GEMMs'
  // padded-B scratch.
  const CheckpointPolicy policy =
      c.memory.checkpoint == CheckpointPolicy::automatic ? CheckpointPolicy::none : c.memory.checkpoint;
  stage->set_memory(MemoryOptions{policy, c.memory.head_chunk_tokens, c.layer_chunk_rows()});
  const int in_flight = pp > 1 ? pp - layout.coords(rank).pp : 1;  // 1F1B: stage i holds p - i micro-batches
  m.activations = uint64_t(stage->activation_bytes_for(c.train.micro_batch, layout.local_tokens())) *
                      uint64_t(in_flight) +
                  gemm_scratch_bytes(std::max(c.model.d_model, c.model.ffn_dim()));
  m.exact = false;
  return m;
}

}  // namespace odyssey
