#include "odyssey/train/footprint.h"

#include <algorithm>

#include "odyssey/core/error.h"
#include "odyssey/core/tensor_view.h"
#include "odyssey/model/architecture.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/train/layout_builder.h"

namespace odyssey {

StateBytes engine_state_bytes(const ParamTable& table, const ZeroOptions& options, int replicas, int rank,
                              int optimizer_states) {
  // As ZeroEngine's constructor partitions (parallel/zero.cpp): stage 0 shards nothing (a one-rank
  // partition whose local layout is the whole buffer).
  const int stage = options.stage;
  const bool sharded = stage > 0;
  const int64_t bucket_bytes = stage == 3 ? 0 : int64_t(options.bucket_mb * 1e6);
  const Partition part(table, build_buckets(table, bucket_bytes), sharded ? replicas : 1, sharded ? rank : 0,
                       comm_shard_align(options.comm));
  // fp32 master weights, gradients and moments (train.precision = fp32; bf16 will count its own).
  const uint64_t f32 = dtype_size(DType::f32), local = uint64_t(part.local_total());
  const uint64_t padded = uint64_t(part.padded_total());
  StateBytes s;
  s.params = f32 * (stage == 3 ? local : padded);
  if ((stage == 1 || stage == 2) && options.comm.weights != WeightComm::none) s.params += f32 * local;
  // bf16: the fp32 master beside the model copy (the copy held as fp32 values today, model/bf16_linears.h).
  if (stage <= 2 && options.bf16) s.params += f32 * local;
  // (hpZ's secondary shards live from a forward to the next update: none between steps.)
  s.grads = (stage >= 2 ? 0 : f32 * padded) + (sharded ? f32 * local : 0);
  s.optimizer = f32 * local * uint64_t(optimizer_states);
  return s;
}

ZeroOptions zero_options(const RunConfig& config) {
  ZeroOptions zo;
  zo.stage = config.parallel.zero_stage;
  zo.bucket_mb = config.parallel.bucket_mb;
  zo.comm.weights = config.comm.weights;
  zo.comm.grads = config.comm.grads;
  zo.comm.hpz = config.comm.hpz;
  zo.comm.grad_pipeline = config.comm.grad_pipeline;
  zo.comm.seed = config.train.seed;
  zo.bf16 = config.train.precision == Precision::bf16;
  return zo;
}

namespace {

int replicas_of(const RunConfig& c, const RankPlace& place) {
  if (place.replicas > 0) return place.replicas;
  ODY_CHECK(c.parallel.dp > 0, "footprint: parallel.dp must be given (it is {}: derived from a world size)",
            c.parallel.dp);
  return c.parallel.dp * c.parallel.sp_ulysses * c.parallel.sp_ring;
}

}  // namespace

StateBytes rank_state_bytes(const RunConfig& config, const RankPlace& place) {
  const Architecture& arch = architecture(config.model.arch);
  const std::vector<std::pair<int, int>> ranges = stage_ranges(config);
  const PipelineShape shape{config.parallel.pp, config.parallel.pp > 1 ? config.parallel.pp_virtual : 1, 1};
  const ZeroOptions zo = zero_options(config);
  constexpr int kAdamWStates = 2;  // m and v
  StateBytes total;
  for (int chunk = 0; chunk < shape.v; ++chunk) {
    const auto [begin, end] = ranges[size_t(chunk * shape.P + place.pp)];
    ParamTable table = arch.stage_table(config.model, StageRange{begin, end});
    if (config.parallel.tp > 1) table = table.tensor_parallel(config.parallel.tp, place.tp);
    const StateBytes s =
        engine_state_bytes(table, zo, replicas_of(config, place), place.replica, kAdamWStates);
    total.params += s.params, total.grads += s.grads, total.optimizer += s.optimizer;
  }
  return total;
}

StateBytes max_rank_state_bytes(const RunConfig& config, int world_size) {
  const ParallelConfig& pc = config.parallel;
  const int others = pc.tp * pc.pp * pc.sp_ulysses * pc.sp_ring;
  ODY_CHECK(others > 0 && world_size % others == 0,
            "a world of {} ranks is not a multiple of tp x pp x sp_ulysses x sp_ring = {}", world_size,
            others);
  const int replicas = (pc.dp > 0 ? pc.dp : world_size / others) * pc.sp_ulysses * pc.sp_ring;
  StateBytes most;
  for (int pp = 0; pp < pc.pp; ++pp)
    for (int tp = 0; tp < pc.tp; ++tp) {
      const StateBytes s = rank_state_bytes(config, RankPlace{pp, tp, 0, replicas});
      if (s.total() > most.total()) most = s;
    }
  return most;
}

}  // namespace odyssey
