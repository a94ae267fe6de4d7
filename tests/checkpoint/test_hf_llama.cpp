// Hugging Face Llama import/export: a round trip is bit for bit (untied and tied, with and without
// Llama-3 rope scaling), config.json carries every key of spec §5.1, sharded checkpoints
// (index.json) and BF16 tensors import, and everything we cannot compute exactly is refused by name.
// Qwen2 (hf-qwen2, the same adapter with q, k, v biases): a round trip is bit for bit (tied and
// untied), its config.json is Qwen2's, and Llama's and Qwen2's files are not mistaken for each other.
#include "odyssey/checkpoint/hf_llama.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/model/params.h"

#include "checkpoint_test_util.h"

namespace fs = std::filesystem;
using namespace odyssey;
using odyssey::testing_checkpoint::error_of;

namespace {

ModelConfig llama(bool tied, bool scaled) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.d_model = 24, c.d_ff = 40, c.seq_len = 33,
  c.vocab_size = 61;
  c.rms_norm_eps = 1e-5, c.rope_theta = 500000, c.tie_embeddings = tied;
  if (scaled) c.rope_scaling = {RopeType::llama3, 32.0, 1.0, 4.0, 16};
  return c;
}

std::vector<float> random_params(const ModelConfig& c) {
  std::vector<float> p(size_t(ParamTable(c).total()));
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::sin(0.7f * float(i) + 0.1f);
  return p;
}

class HfLlama : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::temp_directory_path() / ("hf_llama_" + std::to_string(getpid())); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir(const std::string& sub) const { return (dir_ / sub).string(); }
  fs::path dir_;
};

TEST_F(HfLlama, RoundTripIsBitwise) {
  for (bool tied : {false, true})
    for (bool scaled : {false, true}) {
      const ModelConfig c = llama(tied, scaled);
      const std::vector<float> params = random_params(c);
      const std::string out = dir(std::to_string(tied) + std::to_string(scaled));
      export_hf_llama(c, params.data(), out);
      const ModelConfig back = read_hf_llama_config(out);
      EXPECT_EQ(back.n_layer, c.n_layer);
      EXPECT_EQ(back.n_kv_head, c.n_kv_head);
      EXPECT_EQ(back.head_dim(), c.head_dim());
      EXPECT_EQ(back.d_ff, c.d_ff);
      EXPECT_EQ(back.seq_len, c.seq_len);
      EXPECT_EQ(back.rope_theta, c.rope_theta);
      EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
      EXPECT_EQ(back.tie_embeddings, tied);
      EXPECT_EQ(back.rope_scaling, c.rope_scaling);
      std::vector<float> got(params.size(), -1.0f);
      import_hf_llama(out, back, got.data());
      EXPECT_EQ(got, params) << "tied " << tied << " scaled " << scaled;
      const SafetensorsFile file(out + "/model.safetensors");
      EXPECT_EQ(file.contains("lm_head.weight"), !tied);
      EXPECT_TRUE(file.contains("model.layers.1.self_attn.k_proj.weight"));
      EXPECT_EQ(file.get("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{12, 24}));
    }
}

TEST_F(HfLlama, ConfigJsonHasTheSpecKeys) {
  const nlohmann::json j = nlohmann::json::parse(hf_llama_config_json(llama(false, true)));
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["model_type"], "llama");
  for (const char* key :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
        "max_position_embeddings", "attention_bias", "mlp_bias", "hidden_act", "bos_token_id", "eos_token_id",
        "torch_dtype", "initializer_range"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 16);
}

TEST_F(HfLlama, ImportsShardsAndBf16) {
  const ModelConfig c = llama(false, false);
  const ParamTable table(c);
  const std::vector<float> params = random_params(c);
  const std::string out = dir("sharded");
  fs::create_directories(out);
  write_text_atomic(out + "/config.json", hf_llama_config_json(c));
  // Two shards, the second in BF16 (values widened back exactly when they are bf16-representable).
  std::vector<float> rounded = params;
  std::vector<std::vector<uint16_t>> bf16;
  std::vector<StTensorRef> first, second;
  nlohmann::json map;
  for (const ParamInfo& p : table.tensors()) {
    if (p.unit == 0) {
      first.push_back({p.name, StDtype::F32, p.shape, params.data() + p.offset});
      map[p.name] = "a.safetensors";
      continue;
    }
    std::vector<uint16_t> h(size_t(p.numel));
    for (int64_t i = 0; i < p.numel; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &params[size_t(p.offset + i)], 4);
      h[size_t(i)] = uint16_t(bits >> 16);
      bits = uint32_t(h[size_t(i)]) << 16;
      std::memcpy(&rounded[size_t(p.offset + i)], &bits, 4);
    }
    bf16.push_back(std::move(h));
    second.push_back({p.name, StDtype::BF16, p.shape, bf16.back().data()});
    map[p.name] = "b.safetensors";
  }
  write_safetensors(out + "/a.safetensors", first, {});
  write_safetensors(out + "/b.safetensors", second, {});
  write_text_atomic(out + "/model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  std::vector<float> got(params.size());
  import_hf_llama(out, c, got.data());
  EXPECT_EQ(got, rounded);
}

TEST_F(HfLlama, RefusesWhatItCannotCompute) {
  const ModelConfig c = llama(false, false);
  const std::vector<float> params = random_params(c);
  const std::string out = dir("bad");
  export_hf_llama(c, params.data(), out);
  const std::string config = read_text_file(out + "/config.json");
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(config);
    j[key] = value;
    write_text_atomic(out + "/config.json", j.dump());
    return error_of([&] { read_hf_llama_config(out); });
  };
  EXPECT_HAS(with("hidden_act", "gelu"), "hidden_act");
  EXPECT_HAS(with("attention_bias", true), "attention_bias");
  EXPECT_HAS(with("mlp_bias", true), "mlp_bias");
  EXPECT_HAS(with("model_type", "gpt2"), "model_type");
  EXPECT_HAS(with("rope_scaling", nlohmann::json{{"rope_type", "yarn"}, {"factor", 4.0}}), "yarn");
  EXPECT_HAS(with("num_key_value_heads", 3), "n_kv_head");
  write_text_atomic(out + "/config.json", config);

  // Weights: a missing tensor, a wrong shape and an unknown tensor are all listed; params untouched.
  const ParamTable table(c);
  std::vector<StTensorRef> refs;
  std::vector<float> wrong(24 * 7, 0.0f);
  for (const ParamInfo& p : table.tensors()) {
    if (p.name == "model.layers.0.mlp.up_proj.weight") continue;
    if (p.name == "model.norm.weight") {
      refs.push_back({p.name, StDtype::F32, {7}, wrong.data()});
      continue;
    }
    refs.push_back({p.name, StDtype::F32, p.shape, params.data() + p.offset});
  }
  refs.push_back({"model.layers.0.self_attn.q_proj.bias", StDtype::F32, {16}, wrong.data()});
  refs.push_back(
      {"model.layers.0.self_attn.rotary_emb.inv_freq", StDtype::F32, {3}, wrong.data()});  // ignored
  write_safetensors(out + "/model.safetensors", refs, {});
  std::vector<float> got(params.size(), 7.0f);
  const std::string e = error_of([&] { import_hf_llama(out, c, got.data()); });
  EXPECT_HAS(e, "missing tensor 'model.layers.0.mlp.up_proj.weight'");
  EXPECT_HAS(e, "'model.norm.weight' has shape [7]");
  EXPECT_HAS(e, "unknown tensor 'model.layers.0.self_attn.q_proj.bias'");
  EXPECT_EQ(e.find("inv_freq"), std::string::npos) << e;
  EXPECT_EQ(got, std::vector<float>(params.size(), 7.0f));
}

TEST_F(HfLlama, TiedHeadMustEqualTheEmbedding) {
  const ModelConfig c = llama(true, false);
  const ParamTable table(c);
  const std::vector<float> params = random_params(c);
  const std::string out = dir("tied");
  export_hf_llama(c, params.data(), out);
  std::vector<StTensorRef> refs;
  for (const ParamInfo& p : table.tensors())
    refs.push_back({p.name, StDtype::F32, p.shape, params.data() + p.offset});
  const ParamInfo& embed = table.find("model.embed_tokens.weight");
  refs.push_back({"lm_head.weight", StDtype::F32, embed.shape, params.data() + embed.offset});
  write_safetensors(out + "/model.safetensors", refs, {});
  std::vector<float> got(params.size());
  import_hf_llama(out, c, got.data());  // a head equal to the embedding is accepted
  EXPECT_EQ(got, params);
  std::vector<float> other(size_t(embed.numel), 0.5f);
  refs.back().data = other.data();
  write_safetensors(out + "/model.safetensors", refs, {});
  EXPECT_HAS(error_of([&] { import_hf_llama(out, c, got.data()); }), "lm_head.weight");
}

ModelConfig qwen2(bool tied) {
  ModelConfig c = llama(tied, false);
  c.arch = Arch::qwen2, c.rope_theta = 1e6, c.rms_norm_eps = 1e-6;
  return c;
}

TEST_F(HfLlama, Qwen2RoundTripIsBitwise) {
  for (bool tied : {false, true}) {
    const ModelConfig c = qwen2(tied);
    const std::vector<float> params = random_params(c);
    const std::string out = dir("qwen2_" + std::to_string(tied));
    export_hf_llama(c, params.data(), out);
    const ModelConfig back = read_hf_qwen2_config(out);
    EXPECT_EQ(back.arch, Arch::qwen2);
    EXPECT_EQ(back.n_kv_head, c.n_kv_head);
    EXPECT_EQ(back.d_ff, c.d_ff);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
    EXPECT_EQ(back.tie_embeddings, tied);
    std::vector<float> got(params.size(), -1.0f);
    import_hf_llama(out, back, got.data());
    EXPECT_EQ(got, params) << "tied " << tied;
    const SafetensorsFile file(out + "/model.safetensors");
    EXPECT_EQ(file.contains("lm_head.weight"), !tied);
    for (const char* bias : {"q_proj", "k_proj", "v_proj"})
      EXPECT_TRUE(file.contains(std::string("model.layers.1.self_attn.") + bias + ".bias")) << bias;
    EXPECT_EQ(file.get("model.layers.1.self_attn.k_proj.bias").shape, (std::vector<int64_t>{12}));
    EXPECT_FALSE(file.contains("model.layers.1.self_attn.o_proj.bias"));
  }
}

TEST_F(HfLlama, Qwen2ConfigAndMixUps) {
  const ModelConfig c = qwen2(false);
  const nlohmann::json j = nlohmann::json::parse(hf_llama_config_json(c));
  EXPECT_EQ(j["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(j["model_type"], "qwen2");
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_EQ(j["rope_theta"], 1e6);
  const std::string out = dir("qwen2_mixups");
  export_hf_llama(c, random_params(c).data(), out);
  EXPECT_HAS(error_of([&] { read_hf_llama_config(out); }), "model_type");
  const std::string config = read_text_file(out + "/config.json");
  nlohmann::json sliding = nlohmann::json::parse(config);
  sliding["use_sliding_window"] = true;
  write_text_atomic(out + "/config.json", sliding.dump());
  EXPECT_HAS(error_of([&] { read_hf_qwen2_config(out); }), "use_sliding_window");
  // Llama's weights (no biases) are not Qwen2's: the missing biases are named.
  write_text_atomic(out + "/config.json", config);
  const ModelConfig l = llama(false, false);
  export_hf_llama(l, random_params(l).data(), dir("llama_for_qwen2"));
  std::vector<float> got(size_t(ParamTable(c).total()));
  fs::copy_file(out + "/config.json", dir("llama_for_qwen2") + "/config.json",
                fs::copy_options::overwrite_existing);
  EXPECT_HAS(error_of([&] { import_hf_llama(dir("llama_for_qwen2"), c, got.data()); }),
             "missing tensor 'model.layers.0.self_attn.q_proj.bias'");
}

}  // namespace
