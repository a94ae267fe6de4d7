#include "odyssey/checkpoint/same_model.h"

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/core/error.h"

namespace odyssey {

ModelConfig resolved_model(const ModelConfig& config) {
  ModelConfig c = config;
  c.head_size = config.head_dim();
  c.n_kv_head = config.kv_heads();
  c.d_ff = config.ffn_dim();
  return c;
}

void check_same_model(const ModelConfig& want, const ModelConfig& have, const std::string& dir) {
  const nlohmann::json w = model_config_to_json(resolved_model(want)),
                       h = model_config_to_json(resolved_model(have));
  for (const auto& [key, value] : w.items())
    ODY_CHECK(h.at(key) == value, "checkpoint {} has model.{}={}, the config says {}", dir, key,
              h.at(key).dump(), value.dump());
}

}  // namespace odyssey
