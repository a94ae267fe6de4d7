#include "odyssey/checkpoint/hf_export_dtype.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/bf16.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace odyssey {

namespace fs = std::filesystem;

void convert_hf_export(const std::string& out_dir, ExportDtype dtype) {
  if (dtype == ExportDtype::f32) return;
  const std::string weights = (fs::path(out_dir) / "model.safetensors").string();
  const std::string config = (fs::path(out_dir) / "config.json").string();
  std::vector<StTensorRef> refs;
  std::vector<std::vector<bf16>> data;
  std::map<std::string, std::string> metadata;
  {
    const SafetensorsFile file(weights);  // closed before the rewrite replaces it
    metadata = file.metadata();
    data.reserve(file.tensors().size());
    for (const SafetensorsFile::Tensor& t : file.tensors()) {
      ODY_CHECK(t.dtype == StDtype::F32, "{}: tensor '{}' has dtype {}, expected the export's F32", weights,
                t.name, st_dtype_name(t.dtype));
      std::vector<bf16>& out = data.emplace_back(size_t(t.numel));
      for (size_t i = 0; i < out.size(); ++i) {
        float x;
        std::memcpy(&x, t.data + 4 * i, 4);
        out[i] = to_bf16(x);
      }
      refs.push_back({t.name, StDtype::BF16, t.shape, out.data()});
    }
  }
  nlohmann::json j = nlohmann::json::parse(read_text_file(config));
  j["torch_dtype"] = "bfloat16";
  write_safetensors(weights, refs, metadata);
  write_text_atomic(config, j.dump(2) + "\n");
  fsync_dir(out_dir);
}

}  // namespace odyssey
