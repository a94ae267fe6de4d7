#include "odyssey/checkpoint/hf_gpt2.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "odyssey/checkpoint/json_fields.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/model/architecture.h"

namespace odyssey {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kPrefix = "transformer.";

// Causal-mask buffers that older transformers versions saved with the weights:
// "(transformer.)h.<digits>.attn.bias" and ".attn.masked_bias".
bool is_mask_buffer(std::string name) {
  if (name.rfind(kPrefix, 0) == 0) name.erase(0, kPrefix.size());
  if (name.rfind("h.", 0) != 0) return false;
  size_t i = 2;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 2) return false;
  const std::string rest = name.substr(i);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

}  // namespace

std::string hf_gpt2_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return kPrefix + name + ".weight";
  return kPrefix + name;
}

bool hf_gpt2_is_conv1d(const std::string& name) {
  return name.ends_with(".attn.c_attn.weight") || name.ends_with(".attn.c_proj.weight") ||
         name.ends_with(".mlp.c_fc.weight") || name.ends_with(".mlp.c_proj.weight");
}

std::vector<int64_t> hf_gpt2_shape(const ParamInfo& p) {
  if (hf_gpt2_is_conv1d(p.name)) return {p.shape[1], p.shape[0]};
  return p.shape;
}

void hf_gpt2_to_hf_layout(const ParamInfo& p, const float* params, float* out) {
  const float* src = params + p.offset;
  if (!hf_gpt2_is_conv1d(p.name)) {
    std::memcpy(out, src, size_t(p.numel) * sizeof(float));
    return;
  }
  // ours [n_out, n_in] -> Conv1D [n_in, n_out]
  const int64_t n_out = p.shape[0], n_in = p.shape[1];
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i) out[i * n_out + o] = src[o * n_in + i];
}

void hf_gpt2_from_hf_layout(const ParamInfo& p, const float* in, float* params) {
  float* dst = params + p.offset;
  if (!hf_gpt2_is_conv1d(p.name)) {
    std::memcpy(dst, in, size_t(p.numel) * sizeof(float));
    return;
  }
  const int64_t n_out = p.shape[0], n_in = p.shape[1];
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i) dst[o * n_in + i] = in[i * n_out + o];
}

std::string hf_gpt2_config_json(const ModelConfig& c) {
  validate_model(c);
  // GPT-2's <|endoftext|> is its last token; for other vocabularies the last id is the best guess.
  const int eos = c.vocab_size - 1;
  json j = {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", 0.0},
      {"bos_token_id", eos},
      {"embd_pdrop", 0.0},
      {"eos_token_id", eos},
      {"initializer_range", 0.02},
      {"layer_norm_epsilon", 1e-5},
      {"model_type", "gpt2"},
      {"n_ctx", c.seq_len},
      {"n_embd", c.d_model},
      {"n_head", c.n_head},
      {"n_inner", nullptr},
      {"n_layer", c.n_layer},
      {"n_positions", c.seq_len},
      {"reorder_and_upcast_attn", false},
      {"resid_pdrop", 0.0},
      {"scale_attn_by_inverse_layer_idx", false},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
      {"use_cache", true},
      {"vocab_size", c.vocab_size},
  };
  return j.dump(2) + "\n";
}

void export_hf_gpt2(const ModelConfig& config, const float* params, const std::string& out_dir) {
  const ParamTable table(config);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  ODY_CHECK(!ec, "cannot create directory {}: {}", out_dir, ec.message());

  std::vector<float> hf(size_t(table.total()));
  std::vector<StTensorRef> refs;
  for (const ParamInfo& p : table.tensors()) {
    hf_gpt2_to_hf_layout(p, params, hf.data() + p.offset);
    refs.push_back({hf_gpt2_name(p.name), StDtype::F32, hf_gpt2_shape(p), hf.data() + p.offset});
  }
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), refs, {{"format", "pt"}});
  write_text_atomic((fs::path(out_dir) / "config.json").string(), hf_gpt2_config_json(config));
  fsync_dir(out_dir);
}

ModelConfig read_hf_gpt2_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  ODY_CHECK(j.is_object(), "{}: not a JSON object", path);

  auto get_int = [&](const char* key) {
    ODY_CHECK(j.contains(key), "{}: missing '{}'", path, key);
    ODY_CHECK(j[key].is_number_integer(), "{}: '{}' must be an integer, got {}", path, key, j[key].dump());
    return json_integer<int>(j[key], fmt::format("{}: field '{}'", path, key));  // never narrowed
  };
  // Fields that change the computation: absent means transformers' default, which is ours.
  auto check = [&](const char* key, auto ok, const char* expected) {
    if (j.contains(key) && !ok(j[key]))
      fail("{}: '{}' is {}; Odyssey computes GPT-2 with {}", path, key, j[key].dump(), expected);
  };

  ODY_CHECK(j.contains("model_type") && j["model_type"] == "gpt2",
            "{}: 'model_type' must be \"gpt2\", got {}", path,
            j.contains("model_type") ? j["model_type"].dump() : "nothing");
  ModelConfig c;
  c.arch = Arch::gpt2;
  c.n_layer = int(get_int("n_layer"));
  c.n_head = int(get_int("n_head"));
  c.d_model = int(get_int("n_embd"));
  c.seq_len = int(get_int("n_positions"));
  c.vocab_size = int(get_int("vocab_size"));
  check(
      "activation_function", [](const json& v) { return v == "gelu_new" || v == "gelu_pytorch_tanh"; },
      "\"gelu_new\" (tanh GELU)");
  check(
      "layer_norm_epsilon",
      [](const json& v) { return v.is_number() && std::abs(v.get<double>() - 1e-5) <= 1e-12; }, "1e-05");
  check(
      "n_inner",
      [&](const json& v) { return v.is_null() || (v.is_number_integer() && v == 4 * int64_t(c.d_model)); },
      "null (4 * n_embd)");
  check(
      "tie_word_embeddings", [](const json& v) { return v == true; }, "true (tied LM head)");
  check(
      "scale_attn_weights", [](const json& v) { return v == true; }, "true");
  check(
      "scale_attn_by_inverse_layer_idx", [](const json& v) { return v == false; }, "false");
  check(
      "add_cross_attention", [](const json& v) { return v == false; }, "false");
  try {
    validate_model(c);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  return c;
}

void read_hf_gpt2_tensors(const SafetensorsFile& file, const ModelConfig& config, float* params,
                          const std::string& prefix, bool strict) {
  const ParamTable table(config);
  std::set<std::string> used;
  std::vector<std::string> problems;

  // A tensor may be stored with or without "transformer." (save_pretrained vs original hub files).
  auto resolve = [&](const std::string& hf_name) -> const SafetensorsFile::Tensor* {
    const std::string full = prefix + hf_name, bare = prefix + hf_name.substr(kPrefix.size());
    const auto *a = file.try_get(full), *b = file.try_get(bare);
    if (a) used.insert(full);
    if (b) used.insert(bare);
    if (a && b) problems.push_back(fmt::format("tensor present twice, as '{}' and as '{}'", full, bare));
    return a ? a : b;
  };
  auto is_float = [](StDtype d) {
    return d == StDtype::F32 || d == StDtype::F16 || d == StDtype::BF16 || d == StDtype::F64;
  };

  const std::string head_name = prefix + "lm_head.weight";
  const SafetensorsFile::Tensor* head = file.try_get(head_name);
  if (head) used.insert(head_name);

  // First resolve and check everything, so that params is untouched when the file is unusable.
  std::vector<const SafetensorsFile::Tensor*> source(table.tensors().size(), nullptr);
  for (size_t i = 0; i < table.tensors().size(); ++i) {
    const ParamInfo& p = table.tensors()[i];
    const std::string hf_name = hf_gpt2_name(p.name);
    const SafetensorsFile::Tensor* t = resolve(hf_name);
    // A file that kept the head's name for the tied matrix instead of wte's still has it.
    if (!t && i == 0 && head) t = std::exchange(head, nullptr);
    if (!t) {
      problems.push_back(fmt::format("missing tensor '{}'", prefix + hf_name));
      continue;
    }
    const std::vector<int64_t> shape = hf_gpt2_shape(p);
    if (t->shape != shape) {
      problems.push_back(fmt::format("tensor '{}' has shape {}, expected {}{}", t->name,
                                     st_shape_string(t->shape), st_shape_string(shape),
                                     hf_gpt2_is_conv1d(p.name) ? " (Conv1D: [in, out])" : ""));
      continue;
    }
    if (!is_float(t->dtype)) {
      problems.push_back(fmt::format("tensor '{}' has dtype {}, expected a floating-point dtype", t->name,
                                     st_dtype_name(t->dtype)));
      continue;
    }
    source[i] = t;
  }

  // Odyssey ties the head to wte; a different head cannot be represented.
  const SafetensorsFile::Tensor* wte = source[0];
  if (head && wte) {
    if (head->shape != wte->shape) {
      problems.push_back(fmt::format("tensor '{}' has shape {}, expected {} (tied to wte)", head_name,
                                     st_shape_string(head->shape), st_shape_string(wte->shape)));
    } else if (!is_float(head->dtype) || file.read_f32(head_name) != file.read_f32(wte->name)) {
      problems.push_back(
          fmt::format("tensor '{}' differs from the token embedding; Odyssey only supports a head "
                      "tied to wte (tie_word_embeddings)",
                      head_name));
    }
  }

  if (strict) {
    for (const auto& t : file.tensors()) {
      if (used.count(t.name)) continue;
      const bool ours = t.name.compare(0, prefix.size(), prefix) == 0;
      if (ours && is_mask_buffer(t.name.substr(prefix.size()))) continue;
      problems.push_back(fmt::format("unknown tensor '{}' (shape {})", t.name, st_shape_string(t.shape)));
    }
  }

  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 20);
    std::string list;
    for (size_t i = 0; i < shown; ++i) list += (i ? "\n  " : "") + problems[i];
    if (shown < problems.size()) list += fmt::format("\n  ... and {} more", problems.size() - shown);
    fail(
        "{}: cannot read GPT-2 weights (n_layer={}, n_head={}, d_model={}, seq_len={}, vocab_size={}):\n  {}",
        file.path(), config.n_layer, config.n_head, config.d_model, config.seq_len, config.vocab_size, list);
  }

  std::vector<float> buf;
  for (size_t i = 0; i < table.tensors().size(); ++i) {
    const ParamInfo& p = table.tensors()[i];
    buf.resize(size_t(p.numel));
    file.read_f32(source[i]->name, source[i]->shape, buf.data());
    hf_gpt2_from_hf_layout(p, buf.data(), params);
  }
}

void import_hf_gpt2(const std::string& dir, const ModelConfig& config, float* params) {
  const fs::path path = fs::path(dir) / "model.safetensors";
  if (!fs::exists(path) && fs::exists(fs::path(dir) / "model.safetensors.index.json"))
    fail("{}: sharded safetensors checkpoints are not supported; merge the shards into model.safetensors",
         dir);
  ODY_CHECK(fs::exists(path), "{}: no model.safetensors (Odyssey imports the safetensors format only)", dir);
  const SafetensorsFile file(path.string());
  read_hf_gpt2_tensors(file, config, params);
}

}  // namespace odyssey
