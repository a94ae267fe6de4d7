#include "odyssey/plan/stage_cache.h"

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/model/architecture.h"

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

}  // namespace odyssey
