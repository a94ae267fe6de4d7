// The Llama stage against an independent float64 PyTorch implementation of Hugging Face's
// LlamaForCausalLM (scripts/reference/make_llama_reference.py; committed output in
// tests/data/llama_ref/): two tiny random models, untied with GQA 4/2 and Llama-3 RoPE scaling, and tied
// with one key/value head, imported through the hf-llama adapter. The mean loss over the counted
// targets agrees within 1e-5 relative and every parameter gradient within 1e-4 (max abs error / max abs
// value, per tensor), with the LM head in one chunk and in chunks of 5 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "odyssey/checkpoint/hf_llama.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/model/llama.h"

namespace odyssey {
namespace {

const std::string kRef = std::string(ODYSSEY_TEST_DATA) + "/llama_ref/";

void check(const std::string& name, int head_chunk) {
  SCOPED_TRACE(name + ", head chunk " + std::to_string(head_chunk));
  const std::string dir = kRef + name;
  const ModelConfig c = read_hf_llama_config(dir);
  Llama model(c);
  import_hf_llama(dir, c, model.params());
  model.set_memory({CheckpointPolicy::none, head_chunk});
  std::fill(model.grads(), model.grads() + model.table().total(), 0.0f);

  const SafetensorsFile ref(dir + "/reference.safetensors");
  const std::vector<float> in = ref.read_f32("inputs"), tg = ref.read_f32("targets");
  const int B = int(ref.get("inputs").shape[0]), T = int(ref.get("inputs").shape[1]);
  std::vector<int> inputs(in.begin(), in.end()), targets(tg.begin(), tg.end());
  int64_t count = 0;
  for (int t : targets) count += t >= 0;
  int64_t n = 0;
  const double sum =
      model.forward_backward(inputs.data(), targets.data(), nullptr, B, T, 1.0f / float(count), &n);
  ASSERT_EQ(n, count);
  const double want = ref.read_f32("loss")[0];
  EXPECT_NEAR(sum / double(n), want, 1e-5 * want);

  for (const ParamInfo& p : model.table().tensors()) {
    const std::vector<float> g = ref.read_f32("grad." + p.name);
    ASSERT_EQ(int64_t(g.size()), p.numel) << p.name;
    double err = 0, scale = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      err = std::max(err, std::abs(double(model.grad(p)[i]) - g[size_t(i)]));
      scale = std::max(scale, std::abs(double(g[size_t(i)])));
    }
    EXPECT_GT(scale, 0) << p.name;
    EXPECT_LE(err, 1e-4 * scale) << p.name << ": max error " << err << " of " << scale;
  }
}

TEST(LlamaReference, UntiedGqaLlama3ScalingMatchesFloat64) {
  check("untied_gqa_llama3", 0);
  check("untied_gqa_llama3", 5);
}

TEST(LlamaReference, TiedSingleKvHeadMatchesFloat64) {
  check("tied_mqa", 0);
  check("tied_mqa", 5);
}

}  // namespace
}  // namespace odyssey
