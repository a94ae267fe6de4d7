#include "odyssey/plan/stage_cache.h"

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/model/architecture.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/data_parallel.h"

namespace odyssey {

Stage& planned_stage(const ModelConfig& model, const StageRange& range, const TpPiece& tp) {
  // The whole model config names the stage (its record is what a checkpoint compares, too).
  using Key = std::tuple<std::string, int, int, int, int>;
  static std::map<Key, std::unique_ptr<Stage>> cache;
  const Key key{model_config_to_json(model).dump(), range.layer_begin, range.layer_end, tp.size, tp.rank};
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, architecture(model.arch).make_stage(model, range, false, tp)).first;
  return *it->second;
}

const Partition& planned_partition(const ParamTable& table, int64_t bucket_bytes, int ranks, int rank,
                                   int64_t align) {
  using Key = std::tuple<const ParamTable*, int64_t, int, int, int64_t>;
  static std::map<Key, std::unique_ptr<Partition>> cache;
  const Key key{&table, bucket_bytes, ranks, rank, align};
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache
             .emplace(key, std::make_unique<Partition>(table, build_buckets(table, bucket_bytes), ranks, rank,
                                                       align))
             .first;
  return *it->second;
}

StateBytes planned_engine_state_bytes(const ParamTable& table, const ZeroOptions& options, int replicas,
                                      int rank, int optimizer_states) {
  // engine_state_bytes reads the stage, the buckets, the weights' option and the shard alignment.
  using Key = std::tuple<const ParamTable*, int, double, int, int64_t, int, int, int>;
  static std::map<Key, StateBytes> cache;
  const Key key{
      &table,   options.stage, options.bucket_mb, int(options.comm.weights), comm_shard_align(options.comm),
      replicas, rank,          optimizer_states};
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, engine_state_bytes(table, options, replicas, rank, optimizer_states)).first;
  return it->second;
}

}  // namespace odyssey
