// The Llama family's stages against an independent float64 PyTorch implementation of Hugging Face's
// LlamaForCausalLM (scripts/reference/make_llama_reference.py; committed output in
// tests/data/llama_ref/): three tiny random models, untied with GQA 4/2 and Llama-3 RoPE scaling, tied
// with one key/value head, and untied with as many key/value heads as query heads (5 heads of 6),
// imported through the hf-llama adapter; and of Qwen2ForCausalLM (Llama's block with q, k, v biases:
// scripts/reference/make_qwen2_reference.py, tests/data/qwen2_ref/): untied with GQA 4/2 at rope_theta
// 1e6, tied with one key/value head, imported through the hf-qwen2 adapter.
//
// Tolerances (fp32 engine vs float64 reference): the mean loss over the counted targets within 1e-5
// relative; every parameter gradient within 1e-4 (max abs error / max abs value, per tensor), with the
// LM head in one chunk and in chunks of 5 tokens; the weights after one AdamW step, and after two steps
// with the gradients clipped, within 1e-5 (same measure). As in test_gpt2_reference.cpp, Adam's first
// step g / (|g| + eps) turns fp32 rounding noise on a near-zero gradient into a move of up to lr, so
// elements whose reference gradient is below 1e-4 of their tensor's largest are held to Adam's bound
// instead; our AdamW applied to the reference's own gradients must match everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "odyssey/checkpoint/hf_adapter.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/model/architecture.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/optim/grad_clip.h"

namespace odyssey {
namespace {

const std::string kRef = std::string(ODYSSEY_TEST_DATA) + "/";
const char* const kCases[] = {"llama_ref/untied_gqa_llama3", "llama_ref/tied_mqa", "llama_ref/untied_mha",
                              "qwen2_ref/untied_gqa", "qwen2_ref/tied_mqa"};

// The architecture a case's directory holds (config.json's model_type).
const HfAdapter& adapter_of(const std::string& name) {
  return hf_adapter_for_arch(name.starts_with("qwen2") ? Arch::qwen2 : Arch::llama);
}

// One reference case: the model imported from its safetensors, the batch and the expected values.
struct Case {
  explicit Case(const std::string& name)
      : dir(kRef + name),
        hf(adapter_of(name)),
        config(hf.read_config(dir)),
        ref(dir + "/reference.safetensors") {
    const std::vector<float> in = ref.read_f32("inputs"), tg = ref.read_f32("targets");
    B = int(ref.get("inputs").shape[0]);
    T = int(ref.get("inputs").shape[1]);
    inputs.assign(in.begin(), in.end());
    targets.assign(tg.begin(), tg.end());
    for (int t : targets) count += t >= 0;
  }
  std::unique_ptr<Stage> model(int head_chunk = 0) const {
    auto m = architecture(config.arch).make_stage(config, StageRange{}, true, {});
    hf.import_weights(dir, config, m->params());
    m->set_memory({CheckpointPolicy::none, head_chunk});
    return m;
  }
  // Zeroes the gradients, runs forward and backward of the mean loss, returns the mean loss.
  double loss_and_grads(Stage& m) const {
    std::fill(m.grads(), m.grads() + m.table().total(), 0.0f);
    int64_t n = 0;
    const double sum =
        m.forward_backward(inputs.data(), targets.data(), nullptr, B, T, 1.0f / float(count), &n);
    EXPECT_EQ(n, count);
    return sum / double(n);
  }

  std::string dir;
  const HfAdapter& hf;
  ModelConfig config;
  SafetensorsFile ref;
  int B = 0, T = 0;
  std::vector<int> inputs, targets;
  int64_t count = 0;
};

// max |ours - ref| and max |ref| over a tensor; mask (if given) selects the elements compared.
struct Deviation {
  double diff = 0, scale = 0;
};
Deviation deviation(const float* ours, const std::vector<float>& ref,
                    const std::vector<bool>* mask = nullptr) {
  Deviation e;
  for (size_t i = 0; i < ref.size(); ++i) {
    e.scale = std::max(e.scale, std::abs(double(ref[i])));
    if (!mask || (*mask)[i]) e.diff = std::max(e.diff, std::abs(double(ours[i]) - ref[i]));
  }
  return e;
}

void adamw_step(Stage& m, std::vector<float>& mom, std::vector<float>& var, int64_t step, float scale) {
  const AdamWConfig c{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (const ParamInfo& p : m.table().tensors())
    adamw_update(m.param(p), m.grad(p), mom.data() + p.offset, var.data() + p.offset, size_t(p.numel), c,
                 c.lr, step, scale, p.weight_decay);
}

// The weights against prefix.<name>: within 1e-5 where the reference gradient is above the noise
// floor, elsewhere no further from the start than Adam moves (lr_total (1 + wd |p|)).
void expect_weights(const Case& c, const Stage& m, const std::vector<float>& before,
                    const std::string& prefix, double lr_total) {
  for (const ParamInfo& p : m.table().tensors()) {
    const std::vector<float> want = c.ref.read_f32(prefix + p.name), g = c.ref.read_f32("grad." + p.name);
    double gmax = 0;
    for (float x : g) gmax = std::max(gmax, std::abs(double(x)));
    std::vector<bool> ok(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      ok[i] = std::abs(double(g[i])) > 1e-4 * gmax;
      if (!ok[i]) {
        const double start = before[size_t(p.offset) + i];
        EXPECT_LE(std::abs(m.param(p)[i] - start), lr_total * (1.0 + 0.1 * std::abs(start)) * 1.001)
            << p.name;
      }
    }
    const Deviation e = deviation(m.param(p), want, &ok);
    EXPECT_LE(e.diff, 1e-5 * e.scale) << prefix << p.name << ": max error " << e.diff << " of " << e.scale;
  }
}

TEST(LlamaFamilyReference, LossAndGradientsMatchFloat64) {
  for (const char* name : kCases)
    for (int head_chunk : {0, 5}) {
      SCOPED_TRACE(std::string(name) + ", head chunk " + std::to_string(head_chunk));
      const Case c(name);
      auto m = c.model(head_chunk);
      const double want = c.ref.read_f32("loss")[0];
      EXPECT_NEAR(c.loss_and_grads(*m), want, 1e-5 * want);
      for (const ParamInfo& p : m->table().tensors()) {
        const std::vector<float> g = c.ref.read_f32("grad." + p.name);
        ASSERT_EQ(int64_t(g.size()), p.numel) << p.name;
        const Deviation e = deviation(m->grad(p), g);
        EXPECT_GT(e.scale, 0) << p.name;
        EXPECT_LE(e.diff, 1e-4 * e.scale) << p.name << ": max error " << e.diff << " of " << e.scale;
      }
    }
}

TEST(LlamaFamilyReference, AdamWStepOnReferenceGradients) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Case c(name);
    auto m = c.model();
    for (const ParamInfo& p : m->table().tensors()) {
      const std::vector<float> g = c.ref.read_f32("grad." + p.name);
      std::copy(g.begin(), g.end(), m->grad(p));
    }
    std::vector<float> mom(size_t(m->table().total())), var(mom.size());
    adamw_step(*m, mom, var, 1, 1.0f);
    for (const ParamInfo& p : m->table().tensors()) {
      const Deviation e = deviation(m->param(p), c.ref.read_f32("after_step." + p.name));
      EXPECT_LE(e.diff, 1e-5 * e.scale) << p.name;
    }
  }
}

TEST(LlamaFamilyReference, OneAdamWStep) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Case c(name);
    auto m = c.model();
    const std::vector<float> before(m->params(), m->params() + m->table().total());
    std::vector<float> mom(before.size()), var(before.size());
    c.loss_and_grads(*m);
    adamw_step(*m, mom, var, 1, 1.0f);
    expect_weights(c, *m, before, "after_step.", 1e-3);
  }
}

TEST(LlamaFamilyReference, TwoClippedAdamWSteps) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Case c(name);
    auto m = c.model();
    const std::vector<float> before(m->params(), m->params() + m->table().total());
    std::vector<float> mom(before.size()), var(before.size());
    const std::vector<float> want_loss = c.ref.read_f32("clip.loss"),
                             want_norm = c.ref.read_f32("clip.grad_norm");
    for (int step = 1; step <= 2; ++step) {
      const double loss = c.loss_and_grads(*m);
      EXPECT_NEAR(loss, want_loss[size_t(step - 1)], 1e-5 * want_loss[size_t(step - 1)]) << "step " << step;
      const double norm = std::sqrt(sum_of_squares(m->grads(), size_t(m->table().total())));
      EXPECT_NEAR(norm, want_norm[size_t(step - 1)], 1e-5 * want_norm[size_t(step - 1)]) << "step " << step;
      ASSERT_GT(norm, 0.5) << "clipping must be active for the case to test it";
      adamw_step(*m, mom, var, step, clip_scale(norm, 0.5f));
    }
    expect_weights(c, *m, before, "after_2_steps_clip.", 2e-3);
  }
}

}  // namespace
}  // namespace odyssey
