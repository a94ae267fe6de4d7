// End to end against an independent reference: a float64 PyTorch GPT2LMHeadModel
// (scripts/reference/make_gpt2_reference.py) on a tiny odd-sized model (2 layers, 5 heads of 8,
// context 37, vocab 67, batch 3). Loss, logits, every gradient, and the weights after AdamW steps
// (with and without clipping) must match.
//
// Tolerances (fp32 engine vs float64 reference): loss relative 1e-5; each gradient tensor
// max|ours - ref| / max|ref| <= 1e-4; weights after a step relative 1e-5 (same measure).
//
// Why the optimizer step is checked in two parts: some gradients are analytically zero (the key part
// of c_attn.bias: softmax is invariant to a constant added to all keys). The float64 reference gets
// ~1e-18 there, fp32 gets rounding noise ~1e-9, and Adam's first step g / (|g| + eps) turns that noise
// into a move of up to lr. So (a) our AdamW applied to the reference's gradients must match everywhere,
// and (b) the whole step from our own gradients must match on every element whose gradient is above
// the fp32 noise floor, the others moving no more than Adam allows (lr * (1 + wd |p|)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "odyssey/checkpoint/hf_gpt2.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/model/gpt2.h"
#include "odyssey/optim/adamw.h"
#include "odyssey/optim/grad_clip.h"

using namespace odyssey;

namespace {

const std::string kDir = std::string(ODYSSEY_TEST_DATA) + "/gpt2_ref";

// max|a - b| / max|b| over a tensor.
double rel_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

struct Reference {
  ModelConfig config = read_hf_gpt2_config(kDir);
  SafetensorsFile expected{kDir + "/expected.safetensors"};
  std::vector<int32_t> inputs = expected.read_i32("inputs");
  std::vector<int32_t> targets = expected.read_i32("targets");
  int B = int(expected.get("inputs").shape[0]);
  int T = int(expected.get("inputs").shape[1]);

  // A buffer laid out by our table from tensors stored under prefix + HF name.
  std::vector<float> tensors(const std::string& prefix) const {
    std::vector<float> buf(size_t(ParamTable(config).total()));
    read_hf_gpt2_tensors(expected, config, buf.data(), prefix, false);
    return buf;
  }
};

std::unique_ptr<GPT2> load_model(const Reference& ref) {
  auto model = std::make_unique<GPT2>(ref.config);
  import_hf_gpt2(kDir, ref.config, model->params());
  return model;
}

void adamw_step(GPT2& model, std::vector<float>& m, std::vector<float>& v, int64_t step, float scale) {
  AdamWConfig c{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (const ParamInfo& p : model.table().tensors())
    adamw_update(model.params() + p.offset, model.grads() + p.offset, m.data() + p.offset,
                 v.data() + p.offset, size_t(p.numel), c, c.lr, step, scale, p.weight_decay);
}

}  // namespace

TEST(GPT2Reference, LossLogitsAndGradients) {
  Reference ref;
  auto model = load_model(ref);
  const int N = ref.B * ref.T, V = ref.config.vocab_size;

  // Forward alone: logits and loss.
  int64_t count = 0;
  double loss = model->forward(ref.inputs.data(), ref.targets.data(), nullptr, ref.B, ref.T, &count) / N;
  EXPECT_EQ(count, N);
  std::vector<float> logits = ref.expected.read_f32("logits");
  const Logits got = model->logits();  // rows padded (logits_row_stride)
  std::vector<float> dense(size_t(N) * V);
  for (int i = 0; i < N; ++i) std::copy_n(got.row(i), V, dense.begin() + size_t(i) * V);
  EXPECT_LE(rel_error(dense.data(), logits.data(), int64_t(N) * V), 1e-5);
  const double ref_loss = ref.expected.read_f32("loss")[0];
  EXPECT_LE(std::abs(loss - ref_loss) / ref_loss, 1e-5) << loss << " vs " << ref_loss;

  // Forward + backward: the same loss, and every gradient tensor.
  model->zero_grads();
  double loss2 = model->forward_backward(ref.inputs.data(), ref.targets.data(), nullptr, ref.B, ref.T,
                                         1.0f / N, &count) /
                 N;
  EXPECT_LE(std::abs(loss2 - ref_loss) / ref_loss, 1e-5);
  std::vector<float> grads = ref.tensors("grad.");
  for (const ParamInfo& p : model->table().tensors()) {
    double err = rel_error(model->grads() + p.offset, grads.data() + p.offset, p.numel);
    EXPECT_LE(err, 1e-4) << "gradient of " << p.name;
  }
  double norm = std::sqrt(sum_of_squares(model->grads(), size_t(model->num_params())));
  double ref_norm = ref.expected.read_f32("grad_norm")[0];
  EXPECT_LE(std::abs(norm - ref_norm) / ref_norm, 1e-5);
}

// Elements of each tensor whose reference gradient is above the fp32 noise floor of that tensor.
std::vector<bool> well_conditioned(const ParamTable& table, const std::vector<float>& grads) {
  std::vector<bool> ok(grads.size());
  for (const ParamInfo& p : table.tensors()) {
    double scale = 0;
    for (int64_t i = 0; i < p.numel; ++i)
      scale = std::max(scale, std::abs(double(grads[size_t(p.offset + i)])));
    for (int64_t i = 0; i < p.numel; ++i)
      ok[size_t(p.offset + i)] = std::abs(double(grads[size_t(p.offset + i)])) > 1e-4 * scale;
  }
  return ok;
}

TEST(GPT2Reference, AdamWStepOnReferenceGradients) {
  Reference ref;
  auto model = load_model(ref);
  std::vector<float> grads = ref.tensors("grad.");
  std::copy(grads.begin(), grads.end(), model->grads());
  std::vector<float> m(size_t(model->num_params())), v(m.size());
  adamw_step(*model, m, v, 1, 1.0f);
  std::vector<float> after = ref.tensors("after_step.");
  for (const ParamInfo& p : model->table().tensors())
    EXPECT_LE(rel_error(model->params() + p.offset, after.data() + p.offset, p.numel), 1e-5) << p.name;
}

// max|ours - ref| / max|ref| over the well-conditioned elements; the others within Adam's bound.
void expect_weights_match(const GPT2& model, const std::vector<float>& before,
                          const std::vector<float>& after, const std::vector<bool>& ok, double lr_total) {
  for (const ParamInfo& p : model.table().tensors()) {
    double diff = 0, scale = 0;
    int64_t noisy = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      size_t j = size_t(p.offset + i);
      double ours = model.params()[j], theirs = after[j];
      scale = std::max(scale, std::abs(theirs));
      if (ok[j]) {
        diff = std::max(diff, std::abs(ours - theirs));
      } else {
        ++noisy;
        EXPECT_LE(std::abs(ours - before[j]), lr_total * (1.0 + 0.1 * std::abs(before[j])) * 1.001) << p.name;
      }
    }
    EXPECT_LE(diff / scale, 1e-5) << p.name << " (" << noisy << " of " << p.numel
                                  << " elements at the noise floor)";
  }
}

TEST(GPT2Reference, OneAdamWStep) {
  Reference ref;
  auto model = load_model(ref);
  const int N = ref.B * ref.T;
  std::vector<float> before(model->params(), model->params() + model->num_params());
  std::vector<float> m(size_t(model->num_params())), v(m.size());
  model->zero_grads();
  model->forward_backward(ref.inputs.data(), ref.targets.data(), nullptr, ref.B, ref.T, 1.0f / N, nullptr);
  adamw_step(*model, m, v, 1, 1.0f);
  expect_weights_match(*model, before, ref.tensors("after_step."),
                       well_conditioned(model->table(), ref.tensors("grad.")), 1e-3);
}

TEST(GPT2Reference, TwoClippedAdamWSteps) {
  Reference ref;
  auto model = load_model(ref);
  const int N = ref.B * ref.T;
  std::vector<float> before(model->params(), model->params() + model->num_params());
  std::vector<float> m(size_t(model->num_params())), v(m.size());
  std::vector<float> ref_loss = ref.expected.read_f32("clip.loss");
  std::vector<float> ref_norm = ref.expected.read_f32("clip.grad_norm");
  for (int step = 1; step <= 2; ++step) {
    model->zero_grads();
    double loss = model->forward_backward(ref.inputs.data(), ref.targets.data(), nullptr, ref.B, ref.T,
                                          1.0f / N, nullptr) /
                  N;
    EXPECT_LE(std::abs(loss - ref_loss[size_t(step) - 1]) / ref_loss[size_t(step) - 1], 1e-5)
        << "step " << step;
    double norm = std::sqrt(sum_of_squares(model->grads(), size_t(model->num_params())));
    EXPECT_LE(std::abs(norm - ref_norm[size_t(step) - 1]) / ref_norm[size_t(step) - 1], 1e-5)
        << "step " << step;
    adamw_step(*model, m, v, step, clip_scale(norm, 0.5f));
  }
  expect_weights_match(*model, before, ref.tensors("after_2_steps_clip."),
                       well_conditioned(model->table(), ref.tensors("grad.")), 2e-3);
}
