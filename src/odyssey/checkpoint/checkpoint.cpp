#include "odyssey/checkpoint/checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>

#include "odyssey/checkpoint/json_fields.h"
#include "odyssey/checkpoint/manifest_fields.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/checkpoint/sliced.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/model/architecture.h"

namespace fs = std::filesystem;

namespace odyssey {
namespace {

std::string file_checksum(const std::string& path) {
  auto bytes = read_binary_file(path);
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

void read_tensors(const SafetensorsFile& file, const ParamTable& table, float* base,
                  const std::string& prefix) {
  for (const ParamInfo& p : table.tensors()) file.read_f32(prefix + p.name, p.shape, base + p.offset);
}

}  // namespace

nlohmann::json model_config_to_json(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  return {{"arch", enum_name(kArchNames, c.arch)},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"d_model", c.d_model},
          {"seq_len", c.seq_len},
          {"vocab_size", c.vocab_size},
          {"n_kv_head", c.n_kv_head},
          {"d_ff", c.d_ff},
          {"head_dim", c.head_size},
          {"rms_norm_eps", c.rms_norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling.rope_type", enum_name(kRopeTypeNames, r.rope_type)},
          {"rope_scaling.factor", r.factor},
          {"rope_scaling.low_freq_factor", r.low_freq_factor},
          {"rope_scaling.high_freq_factor", r.high_freq_factor},
          {"rope_scaling.original_max_position_embeddings", r.original_max_position_embeddings},
          {"tie_embeddings", c.tie_embeddings}};
}

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source) {
  const JsonFields m(j, source, "model.");
  ModelConfig c;
  c.arch = parse_enum(kArchNames, m.string("arch"), source + ": model.arch");
  c.n_layer = m.integer<int>("n_layer");
  c.n_head = m.integer<int>("n_head");
  c.d_model = m.integer<int>("d_model");
  c.seq_len = m.integer<int>("seq_len");
  c.vocab_size = m.integer<int>("vocab_size");
  // Written since the Llama keys exist; older (GPT-2) checkpoints have the defaults.
  RopeScaling& r = c.rope_scaling;
  c.n_kv_head = m.integer_or("n_kv_head", c.n_kv_head);
  c.d_ff = m.integer_or("d_ff", c.d_ff);
  c.head_size = m.integer_or("head_dim", c.head_size);
  c.rms_norm_eps = m.number_or("rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = m.number_or("rope_theta", c.rope_theta);
  r.rope_type = parse_enum(kRopeTypeNames, m.string_or("rope_scaling.rope_type", ""),
                           source + ": model.rope_scaling.rope_type");
  r.factor = m.number_or("rope_scaling.factor", r.factor);
  r.low_freq_factor = m.number_or("rope_scaling.low_freq_factor", r.low_freq_factor);
  r.high_freq_factor = m.number_or("rope_scaling.high_freq_factor", r.high_freq_factor);
  r.original_max_position_embeddings =
      m.integer_or("rope_scaling.original_max_position_embeddings", r.original_max_position_embeddings);
  c.tie_embeddings = m.boolean_or("tie_embeddings", c.tie_embeddings);
  try {
    validate_model(c);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return c;
}

std::string save_checkpoint(const std::string& run_dir, const CheckpointState& state, const ParamTable& table,
                            const float* params, const float* m, const float* v, int keep) {
  const std::string tmp_dir = checkpoint_tmp_dir(run_dir, state.step);
  fs::create_directories(run_dir);
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);
  const int64_t total = table.total();
  static const std::vector<std::string> adamw_kinds = {"params", "m", "v"};
  std::vector<std::string> kinds;
  std::vector<std::vector<WrittenFile>> files;
  for (const float* buf : {params, m, v}) {
    if (!buf) break;  // weights only
    kinds.push_back(adamw_kinds[files.size()]);
    files.push_back({write_slice_file(tmp_dir, kinds.back(), 0, table, {{0, total, buf}})});
  }
  CheckpointState s = state;
  if (s.layout.empty()) s.layout = {{"world_size", 1}, {"dp", 1}, {"zero_stage", 0}};
  return commit_checkpoint(run_dir, tmp_dir, s, table, 1, kinds, files, keep);
}

std::string find_latest_checkpoint(const std::string& run_dir) {
  if (!fs::is_directory(run_dir)) return "";
  std::string best, best_dir;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !fs::exists(e.path() / "manifest.json")) continue;  // not complete
    std::string step;
    if (name.rfind("step_", 0) == 0) {
      step = name;
    } else if (name.rfind(".step_", 0) == 0 && name.size() == 18 && name.substr(14) == ".old" &&
               !fs::exists(fs::path(run_dir) / name.substr(1, 13) / "manifest.json")) {
      // A re-save of this step was interrupted between its two renames (file systems without an
      // atomic exchange): the parked copy is the only complete one of its step.
      step = name.substr(1, 13);
    } else {
      continue;
    }
    if (step > best) best = step, best_dir = name;
  }
  return best.empty() ? "" : run_dir + "/" + best_dir;
}

std::string resolve_checkpoint(const std::string& path) {
  ODY_CHECK(fs::is_directory(path), "checkpoint {}: no such directory", path);
  if (fs::exists(fs::path(path) / "manifest.json")) return path;
  std::string latest = find_latest_checkpoint(path);
  ODY_CHECK(!latest.empty(), "{}: neither a checkpoint (no manifest.json) nor a run directory holding one",
            path);
  return latest;
}

std::string manifest_checksum(const nlohmann::json& manifest_without_checksum) {
  const std::string text = manifest_without_checksum.dump();
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

CheckpointState read_checkpoint_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  CheckpointState state;
  try {
    const JsonFields fields(manifest, path);
    ODY_CHECK(fields.string_or("format", "") == "odyssey-checkpoint",
              "{}: not an Odyssey checkpoint manifest", path);
    const int version = fields.integer<int>("format_version");
    ODY_CHECK(version <= kCheckpointFormatVersion,
              "{}: format_version {} is newer than this build reads ({}); upgrade Odyssey", path, version,
              kCheckpointFormatVersion);
    // After the version: a newer format may checksum differently.
    if (manifest.contains(kManifestChecksumKey)) {
      nlohmann::json body = manifest;
      body.erase(kManifestChecksumKey);
      const nlohmann::json& stored = manifest.at(kManifestChecksumKey);
      ODY_CHECK(stored.is_string() && stored.get<std::string>() == manifest_checksum(body),
                "{}: checksum mismatch (the manifest is damaged)", path);
    }
    // Every field the readers use, present and of its type (checkpoint/manifest_fields.h).
    check_manifest_fields(manifest, path, version);
    state.model = model_config_from_json(manifest.at("model"), path);
    state.step = fields.integer<int64_t>("step");
    state.next_row = fields.integer<uint64_t>("next_row");
    state.seed = fields.integer<uint64_t>("seed");
    // Absent or null: empty objects (their fields are read with defaults).
    auto object_or_empty = [&](const char* key) {
      return fields.has(key) ? manifest.at(key) : nlohmann::json::object();
    };
    state.run = object_or_empty("run");
    state.layout = object_or_empty("layout");
    state.schedule = object_or_empty("schedule");
    state.format_version = version;
    state.manifest = manifest;
    if (version >= 2) {
      check_sliced_manifest(dir, state, nullptr);
      return state;
    }
    // Format 1: every file is read whole, so verify them all here.
    for (auto& [name, info] : manifest.at("files").items()) {
      std::string file = dir + "/" + name;
      ODY_CHECK(fs::exists(file), "{}: file {} listed in the manifest is missing", dir, name);
      ODY_CHECK(fs::file_size(file) == info.at("bytes").get<uint64_t>(),
                "{}: size {} differs from the manifest's {}", file, fs::file_size(file),
                info.at("bytes").get<uint64_t>());
      ODY_CHECK(file_checksum(file) == info.at("xxh3_64").get<std::string>(),
                "{}: checksum mismatch (the file is corrupt)", file);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed manifest: {}", path, e.what());
  }
  return state;
}

CheckpointState load_checkpoint(const std::string& dir, const ParamTable& table, float* params, float* m,
                                float* v) {
  CheckpointState state = read_checkpoint_manifest(dir);
  if (state.format_version >= 2) {
    check_sliced_manifest(dir, state, &table);
    const std::vector<DenseRange> all = {{0, table.total()}};
    read_slices(dir, state, table, "params", all, params);
    if (m) read_slices(dir, state, table, "m", all, m);
    if (v) read_slices(dir, state, table, "v", all, v);
    return state;
  }
  SafetensorsFile model(dir + "/model.safetensors");
  read_tensors(model, table, params, "");
  if (m || v) {
    std::string opt_path = dir + "/optimizer.safetensors";
    ODY_CHECK(fs::exists(opt_path), "{}: no optimizer state to resume from (weights-only checkpoint)", dir);
    SafetensorsFile opt(opt_path);
    read_tensors(opt, table, m, "m.");
    read_tensors(opt, table, v, "v.");
  }
  return state;
}

}  // namespace odyssey
