// The fields of a checkpoint manifest, checked once when it is read: every field the readers use later
// (the model, step, data position, seed, layout, kinds, tensors, files and their slices) present, of its
// type and, for integers, within the type that holds it. An older or hand-edited manifest is then
// refused naming the manifest and the field ("<dir>/manifest.json: field 'files.params.rank00000
// .safetensors.slices[0].end' is missing"), never with a JSON library's message.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace odyssey {

// Fails naming `path` and the field. format_version: files of format 1 list bytes and checksums only;
// format 2 and later also tensors and slices.
void check_manifest_fields(const nlohmann::json& manifest, const std::string& path, int format_version);

}  // namespace odyssey
