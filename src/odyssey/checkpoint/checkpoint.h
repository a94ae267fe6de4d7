// Run checkpoints: a directory per step holding a manifest and safetensors files.
//
// Format 2 (written now; see sliced.h) stores every tensor as slices written in parallel by the ranks
// that own them, and can be read back under any layout. Format 1 (still read) was single-layout:
//     manifest.json          format version, model config, step, data position, seed, run config,
//                            layout, and an xxh3 checksum and size of every file below
//     model.safetensors      parameters under their table names (fp32)
//     optimizer.safetensors  AdamW moments "m.<name>", "v.<name>" (absent in a weights-only save)
//
// Both are written into "<run dir>/.step_00000010.tmp/" and renamed when complete, so a crash never
// leaves a directory named step_* that looks whole.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/model/config.h"
#include "odyssey/model/params.h"

namespace odyssey {

constexpr int kCheckpointFormatVersion = 3;

struct CheckpointState {
  ModelConfig model;
  int64_t step = 0;       // optimizer steps completed
  uint64_t next_row = 0;  // rows of the training data consumed (the data position)
  uint64_t seed = 0;
  nlohmann::json run;  // the run configuration and anything else worth recording
  nlohmann::json layout = nlohmann::json::object();    // what it was written with (dp, ZeRO stage, ...)
  nlohmann::json schedule = nlohmann::json::object();  // learning-rate schedule state
  int format_version = kCheckpointFormatVersion;       // as read
  nlohmann::json manifest;                             // the whole manifest, as read
};

// Saves params (and m, v when non-null) from one process as <run_dir>/step_XXXXXXXX (format 2, one
// writer) and returns that path. Keeps only the newest `keep` checkpoints when keep > 0.
std::string save_checkpoint(const std::string& run_dir, const CheckpointState& state, const ParamTable& table,
                            const float* params, const float* m, const float* v, int keep = 0);

// The newest complete checkpoint directory under run_dir ("" when none). Temporary directories of
// unfinished saves are ignored.
std::string find_latest_checkpoint(const std::string& run_dir);

// Accepts a checkpoint directory, or a run directory (its newest checkpoint). Fails naming the path.
std::string resolve_checkpoint(const std::string& path);

// The manifest's own checksum, stored in it under kManifestChecksumKey: the xxh3 of its compact JSON
// without that key. A flipped byte that leaves manifest.json valid JSON (a digit of the step, the
// seed or a learning rate) is then refused like one in a tensor file. Manifests without the key
// (written before it existed) are read unchecked.
inline constexpr const char* kManifestChecksumKey = "manifest_xxh3_64";
std::string manifest_checksum(const nlohmann::json& manifest_without_checksum);

// Reads and checks the manifest: its checksum, format version, every listed file present with its size
// (format 1: and its checksum; format 2 checks each slice's checksum when it is read).
CheckpointState read_checkpoint_manifest(const std::string& dir);

// Loads params (and m, v when non-null; they must then be present) into buffers laid out by table.
// Fails naming the file and tensor on any mismatch.
CheckpointState load_checkpoint(const std::string& dir, const ParamTable& table, float* params, float* m,
                                float* v);

nlohmann::json model_config_to_json(const ModelConfig& config);
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace odyssey
