#include "odyssey/checkpoint/manifest_fields.h"

#include "odyssey/checkpoint/json_fields.h"

namespace odyssey {

namespace {

// A slice of a format-2+ file: which tensor, where in the file, its range and (format 3) its box.
void check_slice(const JsonFields& s) {
  (void)s.string("tensor");
  (void)s.string("entry");
  (void)s.string("xxh3_64");
  (void)s.integer<uint64_t>("offset");
  const int64_t begin = s.integer<int64_t>("begin"), end = s.integer<int64_t>("end");
  ODY_CHECK(0 <= begin && begin <= end, "{}: [begin, end) = [{}, {}) is not a range", s.where("begin"), begin,
            end);
  if (!s.has("box")) return;
  const nlohmann::json& box = s.array("box");
  for (size_t d = 0; d < box.size(); ++d) {
    const std::string where = fmt::format("{}[{}]", s.where("box"), d);
    ODY_CHECK(box[d].is_array() && box[d].size() == 2, "{}: expected [lo, hi], got {}", where, box[d].dump());
    (void)json_integer<int64_t>(box[d][0], where + "[0]");
    (void)json_integer<int64_t>(box[d][1], where + "[1]");
  }
}

}  // namespace

void check_manifest_fields(const nlohmann::json& manifest, const std::string& path, int format_version) {
  const JsonFields m(manifest, path);
  (void)m.object("model");  // its fields: model_config_from_json
  (void)m.integer<int64_t>("step");
  (void)m.integer<uint64_t>("next_row");
  (void)m.integer<uint64_t>("seed");
  for (const char* key : {"run", "layout", "schedule"})
    if (m.has(key)) (void)m.object(key);
  if (m.has("layout")) {
    const JsonFields layout = m.object("layout");
    for (const char* key :
         {"world_size", "dp", "zero_stage", "tp", "pp", "sp_ulysses", "sp_ring", "pp_virtual"})
      (void)layout.integer_or<int>(key, 0);
  }
  const JsonFields files = m.object("files");
  for (const auto& [name, info] : m.at("files").items()) {
    const JsonFields f = files.object(name);
    (void)f.integer<uint64_t>("bytes");
    (void)f.string("xxh3_64");
    if (format_version < 2) continue;
    (void)f.string("kind");
    (void)f.integer<int>("rank");
    const nlohmann::json& slices = f.array("slices");
    for (size_t i = 0; i < slices.size(); ++i)
      check_slice(JsonFields(slices[i], path, fmt::format("files.{}.slices[{}].", name, i)));
  }
  if (format_version < 2) return;
  const nlohmann::json& kinds = m.array("kinds");
  for (size_t i = 0; i < kinds.size(); ++i)
    ODY_CHECK(kinds[i].is_string(), "{}[{}]: expected a string, got {}", m.where("kinds"), i,
              kinds[i].dump());
  const nlohmann::json& tensors = m.array("tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const JsonFields t(tensors[i], path, fmt::format("tensors[{}].", i));
    (void)t.string("name");
    const nlohmann::json& shape = t.array("shape");
    for (size_t d = 0; d < shape.size(); ++d)
      (void)json_integer<int64_t>(shape[d], fmt::format("{}[{}]", t.where("shape"), d));
  }
}

}  // namespace odyssey
