// The run checkpoint (simple, single-layout form; the universal reshardable format extends it).
//
//   <run dir>/step_00000010/
//     manifest.json          format version, model config, step, data position, seed, run config,
//                            layout, and an xxh64 checksum and size of every file below
//     model.safetensors      parameters under their table names (fp32)
//     optimizer.safetensors  AdamW moments "m.<name>", "v.<name>" (absent in a weights-only save)
//
// Written into "<run dir>/.step_00000010.tmp/" and renamed when complete, so a crash never leaves a
// directory named step_* that looks whole; loading verifies every checksum before use.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/model/config.h"
#include "odyssey/model/params.h"

namespace odyssey {

constexpr int kCheckpointFormatVersion = 1;

struct CheckpointState {
  ModelConfig model;
  int64_t step = 0;       // optimizer steps completed
  uint64_t next_row = 0;  // rows of the training data consumed (the data position)
  uint64_t seed = 0;
  nlohmann::json run;  // the run configuration and anything else worth recording
};

// Saves params (and m, v when non-null) as <run_dir>/step_XXXXXXXX and returns that path. Keeps only
// the newest `keep` checkpoints when keep > 0.
std::string save_checkpoint(const std::string& run_dir, const CheckpointState& state, const ParamTable& table,
                            const float* params, const float* m, const float* v, int keep = 0);

// The newest complete checkpoint directory under run_dir ("" when none). Temporary directories of
// unfinished saves are ignored.
std::string find_latest_checkpoint(const std::string& run_dir);

// Accepts a checkpoint directory, or a run directory (its newest checkpoint). Fails naming the path.
std::string resolve_checkpoint(const std::string& path);

// Reads and checks the manifest (format version, every file's size and checksum).
CheckpointState read_checkpoint_manifest(const std::string& dir);

// Loads params (and m, v when non-null; they must then be present) into buffers laid out by table.
// Fails naming the file and tensor on any mismatch.
CheckpointState load_checkpoint(const std::string& dir, const ParamTable& table, float* params, float* m,
                                float* v);

nlohmann::json model_config_to_json(const ModelConfig& config);
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace odyssey
