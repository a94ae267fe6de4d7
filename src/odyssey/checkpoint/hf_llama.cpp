#include "odyssey/checkpoint/hf_llama.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "odyssey/checkpoint/json_fields.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/params.h"

namespace odyssey {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

json read_json(const std::string& path) {
  try {
    json j = json::parse(read_text_file(path));
    ODY_CHECK(j.is_object(), "{}: not a JSON object", path);
    return j;
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

// The safetensors files of a checkpoint directory: model.safetensors, or the shards an
// index.json's weight_map names.
struct TensorFiles {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> owner;  // tensor name -> its file

  explicit TensorFiles(const std::string& dir) {
    const fs::path single = fs::path(dir) / "model.safetensors",
                   index = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(single)) {
      add(single.string());
      return;
    }
    ODY_CHECK(fs::exists(index), "{}: no model.safetensors or model.safetensors.index.json", dir);
    const json j = read_json(index.string());
    ODY_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "{}: no 'weight_map' object",
              index.string());
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      ODY_CHECK(file.is_string(), "{}: weight_map['{}'] is not a file name", index.string(), name);
      const std::string f = file.get<std::string>();
      ODY_CHECK(f.find('/') == std::string::npos && f != ".." && !f.empty(),
                "{}: weight_map['{}'] = '{}' is not a file in the directory", index.string(), name, f);
      shards.insert(f);
    }
    for (const std::string& f : shards) add((fs::path(dir) / f).string());
    for (const auto& [name, file] : j["weight_map"].items()) {
      auto it = owner.find(name);
      ODY_CHECK(it != owner.end() && it->second->path() == (fs::path(dir) / file.get<std::string>()).string(),
                "{}: tensor '{}' is not in {} as weight_map says", index.string(), name,
                file.get<std::string>());
    }
  }

  void add(const std::string& path) {
    files.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& t : files.back()->tensors()) {
      auto [it, fresh] = owner.emplace(t.name, files.back().get());
      ODY_CHECK(fresh, "tensor '{}' is in both {} and {}", t.name, it->second->path(), path);
    }
  }
  const SafetensorsFile::Tensor* find(const std::string& name) const {
    auto it = owner.find(name);
    return it == owner.end() ? nullptr : it->second->try_get(name);
  }
  const SafetensorsFile& file_of(const std::string& name) const { return *owner.at(name); }
};

// A Hugging Face model of the Llama family: Llama, and Qwen2 (Llama's block with q, k, v biases).
struct Family {
  Arch arch;               // model.arch
  const char* model_type;  // config.json's (model.arch's name)
  const char* hf_class;    // config.json's architectures
  const char* name;        // in messages
  bool qkv_bias;           // q, k and v projections with biases
};
const Family kLlama{Arch::llama, "llama", "LlamaForCausalLM", "Llama", false};
const Family kQwen2{Arch::qwen2, "qwen2", "Qwen2ForCausalLM", "Qwen2", true};

// The family of model.arch; fails naming it when it is none of them.
const Family& family_of(const ModelConfig& c) {
  for (const Family* f : {&kLlama, &kQwen2})
    if (c.arch == f->arch) return *f;
  fail("model.arch = {} is not of the Llama family (llama, qwen2)", enum_name(kArchNames, c.arch));
}

std::string config_json(const Family& f, const ModelConfig& c) {
  validate_model(c);
  json j = {
      {"architectures", {f.hf_class}},
      {"attention_dropout", 0.0},
      {"bos_token_id", 0},
      {"eos_token_id", c.vocab_size - 1},
      {"head_dim", c.head_dim()},
      {"hidden_act", "silu"},
      {"hidden_size", c.d_model},
      {"initializer_range", 0.02},
      {"intermediate_size", c.ffn_dim()},
      {"max_position_embeddings", c.seq_len},
      {"model_type", f.model_type},
      {"num_attention_heads", c.n_head},
      {"num_hidden_layers", c.n_layer},
      {"num_key_value_heads", c.kv_heads()},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_scaling", nullptr},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_embeddings},
      {"torch_dtype", "float32"},
      {"use_cache", true},
      {"vocab_size", c.vocab_size},
  };
  if (f.qkv_bias) {  // Qwen2: full attention in every layer
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = false, j["mlp_bias"] = false, j["pretraining_tp"] = 1;
  }
  if (c.rope_scaling.enabled()) {
    const RopeScaling& r = c.rope_scaling;
    j["rope_scaling"] = {{"factor", r.factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings},
                         {"rope_type", enum_name(kRopeTypeNames, r.rope_type)}};
  }
  return j.dump(2) + "\n";
}

}  // namespace

std::string hf_llama_config_json(const ModelConfig& config) {
  return config_json(family_of(config), config);
}

void export_hf_llama(const ModelConfig& config, const float* params, const std::string& out_dir) {
  const Family& f = family_of(config);
  const ParamTable table(config);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  ODY_CHECK(!ec, "cannot create directory {}: {}", out_dir, ec.message());
  std::vector<StTensorRef> refs;
  for (const ParamInfo& p : table.tensors())
    refs.push_back({p.name, StDtype::F32, p.shape, params + p.offset});
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), refs, {{"format", "pt"}});
  write_text_atomic((fs::path(out_dir) / "config.json").string(), config_json(f, config));
  fsync_dir(out_dir);
}

namespace {

ModelConfig read_config(const Family& f, const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const json j = read_json(path);
  auto get_int = [&](const json& o, const char* key) {
    ODY_CHECK(o.contains(key), "{}: missing '{}'", path, key);
    ODY_CHECK(o[key].is_number_integer(), "{}: '{}' must be an integer, got {}", path, key, o[key].dump());
    return json_integer<int>(o[key], fmt::format("{}: field '{}'", path, key));  // never narrowed
  };
  auto get_number = [&](const json& o, const char* key, double fallback) {
    if (!o.contains(key) || o[key].is_null()) return fallback;
    ODY_CHECK(o[key].is_number(), "{}: '{}' must be a number, got {}", path, key, o[key].dump());
    return o[key].get<double>();
  };
  // Keys that change the computation: absent means transformers' default, which is ours.
  auto refuse_unless = [&](const char* key, auto ok, const char* expected) {
    if (j.contains(key) && !ok(j[key]))
      fail("{}: '{}' is {}; Odyssey computes {} with {}", path, key, j[key].dump(), f.name, expected);
  };
  ODY_CHECK(j.contains("model_type") && j["model_type"] == f.model_type,
            "{}: 'model_type' must be \"{}\", got {}", path, f.model_type,
            j.contains("model_type") ? j["model_type"].dump() : "nothing");
  refuse_unless(
      "hidden_act", [](const json& v) { return v == "silu"; }, "\"silu\" (SwiGLU)");
  refuse_unless(
      "attention_bias", [&](const json& v) { return v == f.qkv_bias; },
      f.qkv_bias ? "biases on q, k and v" : "no attention biases");
  refuse_unless(
      "mlp_bias", [](const json& v) { return v == false; }, "no MLP biases");
  refuse_unless(
      "use_sliding_window", [](const json& v) { return v == false; }, "full attention in every layer");

  ModelConfig c;
  c.arch = f.arch;
  c.vocab_size = get_int(j, "vocab_size");
  c.d_model = get_int(j, "hidden_size");
  c.d_ff = get_int(j, "intermediate_size");
  c.n_layer = get_int(j, "num_hidden_layers");
  c.n_head = get_int(j, "num_attention_heads");
  c.n_kv_head = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                    ? get_int(j, "num_key_value_heads")
                    : c.n_head;
  c.head_size = j.contains("head_dim") && !j["head_dim"].is_null() ? get_int(j, "head_dim") : 0;
  c.seq_len = j.contains("max_position_embeddings") ? get_int(j, "max_position_embeddings") : 2048;
  c.rms_norm_eps = get_number(j, "rms_norm_eps", 1e-6);
  c.rope_theta = get_number(j, "rope_theta", 10000.0);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())  // transformers v5
    c.rope_theta = get_number(j["rope_parameters"], "rope_theta", c.rope_theta);
  c.tie_embeddings = JsonFields(j, path).boolean_or("tie_word_embeddings", false);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& r = j["rope_scaling"];
    ODY_CHECK(r.is_object(), "{}: 'rope_scaling' must be an object or null", path);
    const JsonFields rf(r, path, "rope_scaling.");
    const std::string type = rf.string_or("rope_type", rf.string_or("type", ""));
    ODY_CHECK(type == "llama3", "{}: rope_scaling type '{}' is not supported (llama3, or none)", path, type);
    RopeScaling& s = c.rope_scaling;
    s.rope_type = RopeType::llama3;
    s.factor = get_number(r, "factor", s.factor);
    s.low_freq_factor = get_number(r, "low_freq_factor", s.low_freq_factor);
    s.high_freq_factor = get_number(r, "high_freq_factor", s.high_freq_factor);
    s.original_max_position_embeddings = get_int(r, "original_max_position_embeddings");
  }
  try {
    validate_model(c);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  return c;
}

}  // namespace

ModelConfig read_hf_llama_config(const std::string& dir) {
  return read_config(kLlama, dir);
}

ModelConfig read_hf_qwen2_config(const std::string& dir) {
  return read_config(kQwen2, dir);
}

void import_hf_llama(const std::string& dir, const ModelConfig& config, float* params) {
  const Family& f = family_of(config);
  const ParamTable table(config);
  const TensorFiles files(dir);
  std::set<std::string> used;
  std::vector<std::string> problems;
  auto is_float = [](StDtype d) {
    return d == StDtype::F32 || d == StDtype::F16 || d == StDtype::BF16 || d == StDtype::F64;
  };
  // Resolve and check everything first, so params is untouched when the checkpoint is unusable.
  std::vector<const SafetensorsFile::Tensor*> source;
  for (const ParamInfo& p : table.tensors()) {
    const SafetensorsFile::Tensor* t = files.find(p.name);
    if (t) used.insert(p.name);
    if (!t)
      problems.push_back(fmt::format("missing tensor '{}'", p.name));
    else if (t->shape != p.shape)
      problems.push_back(fmt::format("tensor '{}' has shape {}, expected {}", p.name,
                                     st_shape_string(t->shape), st_shape_string(p.shape)));
    else if (!is_float(t->dtype))
      problems.push_back(fmt::format("tensor '{}' has dtype {}, expected a floating-point dtype", p.name,
                                     st_dtype_name(t->dtype)));
    source.push_back(t);
  }
  // Tied: a stored head must equal the embedding (it is not a parameter of ours).
  if (config.tie_embeddings) {
    if (const SafetensorsFile::Tensor* head = files.find("lm_head.weight")) {
      used.insert("lm_head.weight");
      const SafetensorsFile::Tensor* embed = files.find("model.embed_tokens.weight");
      if (embed && (head->shape != embed->shape || !is_float(head->dtype) ||
                    files.file_of("lm_head.weight").read_f32("lm_head.weight") !=
                        files.file_of(embed->name).read_f32(embed->name)))
        problems.push_back(
            "tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but "
            "tie_word_embeddings is true");
    }
  }
  for (const auto& [name, file] : files.owner) {
    if (used.count(name) || name.ends_with(".rotary_emb.inv_freq")) continue;
    problems.push_back(fmt::format("unknown tensor '{}' in {}", name, file->path()));
  }
  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 20);
    std::string list;
    for (size_t i = 0; i < shown; ++i) list += (i ? "\n  " : "") + problems[i];
    if (shown < problems.size()) list += fmt::format("\n  ... and {} more", problems.size() - shown);
    fail(
        "{}: cannot read {} weights (n_layer={}, n_head={}, n_kv_head={}, d_model={}, d_ff={}, "
        "vocab_size={}, "
        "tie_embeddings={}):\n  {}",
        dir, f.name, config.n_layer, config.n_head, config.kv_heads(), config.d_model, config.ffn_dim(),
        config.vocab_size, config.tie_embeddings, list);
  }
  for (size_t i = 0; i < table.tensors().size(); ++i) {
    const ParamInfo& p = table.tensors()[i];
    files.file_of(p.name).read_f32(p.name, p.shape, params + p.offset);
  }
}

}  // namespace odyssey
