#include "odyssey/checkpoint/hf_gpt2.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/model/gpt2_params.h"
#include "odyssey/model/params.h"

#include "checkpoint_test_util.h"

namespace fs = std::filesystem;
using namespace odyssey;
using odyssey::testing_checkpoint::error_of;

namespace {

const std::string kRef = std::string(ODYSSEY_TEST_DATA) + "/gpt2_ref";

ModelConfig ref_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 5;
  c.d_model = 40;
  c.seq_len = 37;
  c.vocab_size = 67;
  return c;
}

// A writable copy of a safetensors file's tensors, to damage on purpose.
struct OwnedTensor {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<OwnedTensor> load_all(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<OwnedTensor> out;
  for (const auto& t : f.tensors()) out.push_back({t.name, t.dtype, t.shape, {t.data, t.data + t.bytes}});
  return out;
}

void save_all(const std::string& path, const std::vector<OwnedTensor>& ts) {
  std::vector<StTensorRef> refs;
  for (const auto& t : ts) refs.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  write_safetensors(path, refs, {{"format", "pt"}});
}

class HfGpt2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ody_hf_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The reference model with its tensors edited, in a fresh directory; returns the directory.
  std::string edited_ref(const std::function<void(std::vector<OwnedTensor>&)>& edit) {
    auto ts = load_all(kRef + "/model.safetensors");
    edit(ts);
    std::string d = (dir_ / ("edit" + std::to_string(edits_++))).string();
    fs::create_directories(d);
    save_all(d + "/model.safetensors", ts);
    return d;
  }

  fs::path dir_;
  int edits_ = 0;
};

OwnedTensor* find(std::vector<OwnedTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return &t;
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

}  // namespace

TEST(HfGpt2Names, MapsOurNamesToHuggingFace) {
  EXPECT_EQ(hf_gpt2_name("wte"), "transformer.wte.weight");
  EXPECT_EQ(hf_gpt2_name("wpe"), "transformer.wpe.weight");
  EXPECT_EQ(hf_gpt2_name("h.11.attn.c_attn.bias"), "transformer.h.11.attn.c_attn.bias");
  EXPECT_EQ(hf_gpt2_name("ln_f.weight"), "transformer.ln_f.weight");
  EXPECT_TRUE(hf_gpt2_is_conv1d("h.0.attn.c_attn.weight"));
  EXPECT_TRUE(hf_gpt2_is_conv1d("h.0.attn.c_proj.weight"));
  EXPECT_TRUE(hf_gpt2_is_conv1d("h.3.mlp.c_fc.weight"));
  EXPECT_TRUE(hf_gpt2_is_conv1d("h.3.mlp.c_proj.weight"));
  EXPECT_FALSE(hf_gpt2_is_conv1d("h.3.mlp.c_proj.bias"));
  EXPECT_FALSE(hf_gpt2_is_conv1d("wte"));
  EXPECT_FALSE(hf_gpt2_is_conv1d("h.0.ln_1.weight"));
}

TEST_F(HfGpt2Test, ExportThenImportIsIdentity) {
  ModelConfig c;  // odd sizes everywhere
  c.n_layer = 3;
  c.n_head = 3;
  c.d_model = 21;
  c.seq_len = 13;
  c.vocab_size = 29;
  const ParamTable table(c);
  const StageParams names = gpt2_stage_params(table, StageRange{}.resolved(c), c);
  std::vector<float> params(size_t(table.total()));
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  for (auto& x : params) x = normal(gen);

  const std::string out = (dir_ / "export" / "nested").string();  // created by the export
  export_hf_gpt2(c, params.data(), out);

  const ModelConfig back = read_hf_gpt2_config(out);
  EXPECT_EQ(back.n_layer, 3);
  EXPECT_EQ(back.n_head, 3);
  EXPECT_EQ(back.d_model, 21);
  EXPECT_EQ(back.seq_len, 13);
  EXPECT_EQ(back.vocab_size, 29);

  std::vector<float> imported(params.size(), NAN);
  import_hf_gpt2(out, back, imported.data());
  EXPECT_EQ(std::memcmp(imported.data(), params.data(), params.size() * sizeof(float)), 0);

  // The file holds HF names and layouts: Conv1D weights transposed, no lm_head, format pt.
  SafetensorsFile f(out + "/model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().size(), table.tensors().size());
  EXPECT_FALSE(f.contains("lm_head.weight"));
  const ParamInfo& fc = *names.layer(2).up_w;  // ours [4C, C]
  const auto& t = f.get("transformer.h.2.mlp.c_fc.weight");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{21, 84}));
  const auto hf = f.read_f32(t.name);
  for (int64_t o : {0, 5, 83})
    for (int64_t i : {0, 7, 20}) EXPECT_EQ(hf[size_t(i * 84 + o)], params[size_t(fc.offset + o * 21 + i)]);
  EXPECT_EQ(f.read_f32("transformer.wte.weight"),
            std::vector<float>(params.begin(), params.begin() + names.embed->numel));

  // No temporaries left behind.
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_TRUE(e.path().filename() == "model.safetensors" || e.path().filename() == "config.json")
        << e.path();
}

TEST_F(HfGpt2Test, ReferenceConfigMatchesExport) {
  const ModelConfig c = read_hf_gpt2_config(kRef);
  EXPECT_EQ(c.arch, Arch::gpt2);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 5);
  EXPECT_EQ(c.d_model, 40);
  EXPECT_EQ(c.seq_len, 37);
  EXPECT_EQ(c.vocab_size, 67);
  // The Python reference and our export write the same bytes.
  EXPECT_EQ(hf_gpt2_config_json(c), read_text_file(kRef + "/config.json"));
}

TEST_F(HfGpt2Test, ImportsReferenceWithConv1DTransposed) {
  const ModelConfig c = ref_config();
  const ParamTable table(c);
  const StageParams names = gpt2_stage_params(table, StageRange{}.resolved(c), c);
  std::vector<float> params(size_t(table.total()), NAN);
  import_hf_gpt2(kRef, c, params.data());
  for (float x : params) ASSERT_TRUE(std::isfinite(x));

  SafetensorsFile f(kRef + "/model.safetensors");
  const int64_t C = 40;
  // c_attn: file [C, 3C] (in, out); ours [3C, C] (out, in).
  const auto qkv = f.read_f32("transformer.h.1.attn.c_attn.weight");
  const ParamInfo& qkv_w = *names.layer(1).qkv_w;
  for (int64_t i : {0, 3, 39})
    for (int64_t o : {0, 41, 97, 119})
      EXPECT_EQ(params[size_t(qkv_w.offset + o * C + i)], qkv[size_t(i * 3 * C + o)]) << i << "," << o;
  EXPECT_NE(params[size_t(qkv_w.offset + 1 * C + 2)], qkv[size_t(1 * 3 * C + 2)]);  // not a plain copy
  // mlp.c_proj: file [4C, C]; ours [C, 4C].
  const auto proj = f.read_f32("transformer.h.0.mlp.c_proj.weight");
  const ParamInfo& pw = *names.layer(0).down_w;
  for (int64_t i : {0, 77, 159})
    for (int64_t o : {0, 13, 39})
      EXPECT_EQ(params[size_t(pw.offset + o * 4 * C + i)], proj[size_t(i * C + o)]);
  // Vectors and embeddings are copied as they are.
  EXPECT_EQ(f.read_f32("transformer.h.1.ln_2.bias"),
            std::vector<float>(params.begin() + names.layer(1).norm2_b->offset,
                               params.begin() + names.layer(1).norm2_b->offset + C));
  EXPECT_EQ(f.read_f32("transformer.wpe.weight"),
            std::vector<float>(params.begin() + names.positions->offset,
                               params.begin() + names.positions->offset + names.positions->numel));

  // Re-exporting writes the reference file byte for byte.
  export_hf_gpt2(c, params.data(), dir_.string());
  EXPECT_TRUE(read_binary_file(dir_.string() + "/model.safetensors") ==
              read_binary_file(kRef + "/model.safetensors"));
}

TEST_F(HfGpt2Test, ReadsPrefixedSetsOfExpectedFile) {
  const ModelConfig c = ref_config();
  const ParamTable table(c);
  SafetensorsFile e(kRef + "/expected.safetensors");
  for (const char* prefix : {"grad.", "after_step.", "after_2_steps_clip."}) {
    std::vector<float> buf(size_t(table.total()), NAN);
    read_hf_gpt2_tensors(e, c, buf.data(), prefix, /*strict=*/false);
    for (float x : buf) ASSERT_TRUE(std::isfinite(x)) << prefix;
  }
  // Strict reading of a prefixed set rejects everything else in the file.
  std::vector<float> buf(size_t(table.total()));
  std::string msg = error_of([&] { read_hf_gpt2_tensors(e, c, buf.data(), "grad.", /*strict=*/true); });
  EXPECT_HAS(msg, "unknown tensor 'logits'");

  const auto inputs = e.read_i32("inputs"), targets = e.read_i32("targets");
  EXPECT_EQ(e.get("inputs").shape, (std::vector<int64_t>{3, 37}));
  EXPECT_EQ(targets.size(), 3u * 37u);
  for (int32_t t : inputs) EXPECT_TRUE(t >= 0 && t < 67);
  for (int32_t t : targets) EXPECT_TRUE(t >= 0 && t < 67);
  EXPECT_EQ(e.get("logits").shape, (std::vector<int64_t>{3, 37, 67}));
  const float loss = e.read_f32("loss")[0];
  EXPECT_GT(loss, 4.0f);
  EXPECT_LT(loss, 6.0f);
}

TEST_F(HfGpt2Test, MissingWrongShapeAndUnknownTensorsAreNamed) {
  const ModelConfig c = ref_config();
  std::vector<float> params(size_t(ParamTable(c).total()));

  std::string d = edited_ref([](auto& ts) {
    std::erase_if(ts, [](const OwnedTensor& t) {
      return t.name == "transformer.h.1.ln_2.bias" || t.name == "transformer.wpe.weight";
    });
  });
  std::string msg = error_of([&] { import_hf_gpt2(d, c, params.data()); });
  EXPECT_HAS(msg, d + "/model.safetensors");
  EXPECT_HAS(msg, "missing tensor 'transformer.h.1.ln_2.bias'");
  EXPECT_HAS(msg, "missing tensor 'transformer.wpe.weight'");
  // Nothing was written: the checks come before any copy.
  EXPECT_TRUE(std::all_of(params.begin(), params.end(), [](float x) { return x == 0.0f; }));

  // A Conv1D weight stored in our [out, in] layout instead of HF's [in, out].
  d = edited_ref([](auto& ts) { find(ts, "transformer.h.0.mlp.c_fc.weight")->shape = {160, 40}; });
  msg = error_of([&] { import_hf_gpt2(d, c, params.data()); });
  EXPECT_HAS(msg, "'transformer.h.0.mlp.c_fc.weight' has shape [160, 40], expected [40, 160]");

  d = edited_ref([](auto& ts) {
    auto extra = *find(ts, "transformer.h.1.ln_1.weight");
    extra.name = "transformer.h.2.ln_1.weight";
    ts.push_back(extra);
  });
  msg = error_of([&] { import_hf_gpt2(d, c, params.data()); });
  EXPECT_HAS(msg, "unknown tensor 'transformer.h.2.ln_1.weight'");

  // A model of other sizes than the config names the config and the tensors.
  ModelConfig wide = c;
  wide.vocab_size = 68;
  std::vector<float> wide_params(size_t(ParamTable(wide).total()));
  msg = error_of([&] { import_hf_gpt2(kRef, wide, wide_params.data()); });
  EXPECT_HAS(msg, "vocab_size=68");
  EXPECT_HAS(msg, "'transformer.wte.weight' has shape [67, 40], expected [68, 40]");

  // Only the mask buffers are ignored, not anything that resembles them.
  d = edited_ref([](auto& ts) {
    ts.push_back({"transformer.h.x.attn.bias", StDtype::F32, {1}, std::vector<uint8_t>(4)});
    ts.push_back({"transformer.h.0.attn.biases", StDtype::F32, {1}, std::vector<uint8_t>(4)});
  });
  msg = error_of([&] { import_hf_gpt2(d, c, params.data()); });
  EXPECT_HAS(msg, "unknown tensor 'transformer.h.x.attn.bias'");
  EXPECT_HAS(msg, "unknown tensor 'transformer.h.0.attn.biases'");

  msg = error_of([&] { import_hf_gpt2((dir_ / "nothing").string(), c, params.data()); });
  EXPECT_HAS(msg, "model.safetensors");
}

TEST_F(HfGpt2Test, IgnoresMaskBuffersAndTiedHead) {
  const ModelConfig c = ref_config();
  const ParamTable table(c);
  std::vector<float> want(size_t(table.total())), got(want.size());
  import_hf_gpt2(kRef, c, want.data());

  // Older transformers saved the causal-mask buffers and sometimes the tied head.
  std::string d = edited_ref([](auto& ts) {
    ts.push_back(
        {"transformer.h.0.attn.bias", StDtype::F32, {1, 1, 37, 37}, std::vector<uint8_t>(37 * 37 * 4)});
    ts.push_back({"transformer.h.1.attn.masked_bias", StDtype::F32, {}, std::vector<uint8_t>(4)});
    auto head = *find(ts, "transformer.wte.weight");
    head.name = "lm_head.weight";
    ts.push_back(head);
  });
  import_hf_gpt2(d, c, got.data());
  EXPECT_EQ(got, want);

  // The original hub files have no "transformer." prefix.
  d = edited_ref([](auto& ts) {
    for (auto& t : ts) t.name = t.name.substr(std::string("transformer.").size());
    ts.push_back({"h.1.attn.bias", StDtype::F32, {1, 1, 37, 37}, std::vector<uint8_t>(37 * 37 * 4)});
  });
  std::fill(got.begin(), got.end(), 0.0f);
  import_hf_gpt2(d, c, got.data());
  EXPECT_EQ(got, want);

  // A file that kept only the head's name for the tied matrix.
  d = edited_ref([](auto& ts) { find(ts, "transformer.wte.weight")->name = "lm_head.weight"; });
  std::fill(got.begin(), got.end(), 0.0f);
  import_hf_gpt2(d, c, got.data());
  EXPECT_EQ(got, want);

  // An untied head cannot be represented.
  d = edited_ref([](auto& ts) {
    auto head = *find(ts, "transformer.wte.weight");
    head.name = "lm_head.weight";
    head.bytes[5] ^= 1;
    ts.push_back(head);
  });
  std::string msg = error_of([&] { import_hf_gpt2(d, c, got.data()); });
  EXPECT_HAS(msg, "'lm_head.weight' differs");

  // The same tensor under both names is ambiguous.
  d = edited_ref([](auto& ts) {
    auto dup = *find(ts, "transformer.ln_f.bias");
    dup.name = "ln_f.bias";
    ts.push_back(dup);
  });
  msg = error_of([&] { import_hf_gpt2(d, c, got.data()); });
  EXPECT_HAS(msg, "'transformer.ln_f.bias'");
  EXPECT_HAS(msg, "'ln_f.bias'");
}

TEST_F(HfGpt2Test, ImportsHalfPrecisionWeights) {
  const ModelConfig c = ref_config();
  const ParamTable table(c);
  std::vector<float> want(size_t(table.total())), got(want.size());
  import_hf_gpt2(kRef, c, want.data());
  // bf16 = the top half of each fp32: the import must give exactly the truncated values.
  std::string d = edited_ref([](auto& ts) {
    for (auto& t : ts) {
      std::vector<uint8_t> half(t.bytes.size() / 2);
      for (size_t i = 0; i < half.size() / 2; ++i) std::memcpy(&half[2 * i], &t.bytes[4 * i + 2], 2);
      t.bytes = half;
      t.dtype = StDtype::BF16;
    }
  });
  import_hf_gpt2(d, c, got.data());
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &want[i], 4);
    bits &= 0xffff0000u;
    float trunc;
    std::memcpy(&trunc, &bits, 4);
    ASSERT_EQ(got[i], trunc) << i;
  }
}

TEST_F(HfGpt2Test, ConfigErrorsNameFileAndKey) {
  const std::string good = read_text_file(kRef + "/config.json");
  auto write_config = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_text_atomic((dir_ / "config.json").string(), text);
    return error_of([&] { read_hf_gpt2_config(dir_.string()); });
  };
  const std::string file = (dir_ / "config.json").string();
  std::string msg = write_config("\"gelu_new\"", "\"gelu\"");
  EXPECT_HAS(msg, file);
  EXPECT_HAS(msg, "activation_function");
  msg = write_config("\"n_embd\": 40", "\"n_embed\": 40");
  EXPECT_HAS(msg, "missing 'n_embd'");
  msg = write_config("\"n_embd\": 40", "\"n_embd\": 42");  // not divisible by 5 heads
  EXPECT_HAS(msg, file);
  EXPECT_HAS(msg, "n_head");
  msg = write_config("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
  EXPECT_HAS(msg, "tie_word_embeddings");
  msg = write_config("\"n_inner\": null", "\"n_inner\": 100");
  EXPECT_HAS(msg, "n_inner");
  msg = write_config("1e-05", "1e-06");
  EXPECT_HAS(msg, "layer_norm_epsilon");
  msg = write_config("\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"");
  EXPECT_HAS(msg, "model_type");
  msg = write_config("{", "[");
  EXPECT_HAS(msg, "not valid JSON");
}
