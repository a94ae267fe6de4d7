// The Hugging Face adapters, one per architecture: how `odyssey export --to hf-<arch>` and
// `odyssey import --from hf-<arch>` map our flat parameters to a transformers model directory
// (model.safetensors + config.json). A new architecture adds its adapter file (hf_<arch>.*) and one
// entry here.
#pragma once

#include <string>

#include "odyssey/model/config.h"

namespace odyssey {

struct HfAdapter {
  Arch arch;           // model.arch
  const char* format;  // the CLI's name: "hf-" + arch
  // Reads dir/config.json; refuses, by key, a model we do not compute exactly.
  ModelConfig (*read_config)(const std::string& dir);
  // Reads dir/model.safetensors into params (the whole model's table), untouched on failure.
  void (*import_weights)(const std::string& dir, const ModelConfig& config, float* params);
  // Writes out_dir/model.safetensors and out_dir/config.json.
  void (*export_weights)(const ModelConfig& config, const float* params, const std::string& out_dir);
};

// The adapter of format ("hf-gpt2"); fails naming the option and the known formats.
const HfAdapter& hf_adapter_for_format(const std::string& format, const char* option);
// The adapter of architecture arch; fails naming it when there is none.
const HfAdapter& hf_adapter_for_arch(Arch arch);
// The known formats, for help texts: "hf-gpt2" (", "-separated).
std::string hf_formats();

}  // namespace odyssey
