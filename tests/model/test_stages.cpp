// Pipeline stages: a model cut into stages over layer ranges, chained through the hidden-state
// hand-offs (acts.input / output() forward, acts.output_grad / input_grad() backward), computes the
// whole model's loss and gradients, for every architecture (GPT-2, Llama tied and untied). Everything
// but a tied embedding is bitwise equal; a tied embedding gets its head and embedding gradients in
// two stages, whose sum differs from the whole model's accumulation only in rounding order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/gpt2.h"

namespace odyssey {
namespace {

ModelConfig gpt2() {
  ModelConfig c;
  c.n_layer = 4, c.n_head = 3, c.d_model = 24, c.seq_len = 19, c.vocab_size = 53;
  return c;
}

ModelConfig llama(bool tied) {
  ModelConfig c = gpt2();
  c.arch = Arch::llama;
  c.n_head = 4, c.n_kv_head = 2, c.d_ff = 40, c.tie_embeddings = tied;
  return c;
}

std::vector<ModelConfig> configs() {
  return {gpt2(), llama(false), llama(true)};
}

std::unique_ptr<Stage> make(const ModelConfig& c, const StageRange& range, bool storage = true) {
  return architecture(c.arch).make_stage(c, range, storage, {});
}

void init(Stage& s, uint64_t seed) {
  init_parameters(s.params(), s.table(), s.config(), seed);
  std::fill(s.grads(), s.grads() + s.table().total(), 0.0f);
}

// The tied embedding (its head and embedding gradients are summed across stages), if any.
bool tied_embedding(const ModelConfig& c, const std::string& name) {
  return name == "wte" || (c.tie_embeddings && name == "model.embed_tokens.weight");
}

// Records the unit uses a stage's hooks see, to compare with its declared schedule.
struct RecordingHooks : LayerHooks {
  std::vector<UnitUse> seen;
  void before_forward(int u) override { seen.push_back({u, true}); }
  void before_backward(int u) override { seen.push_back({u, false}); }
};

struct Batch {
  int B = 2, T = 17;
  std::vector<int> inputs, targets;
  Batch() {
    for (int i = 0; i < B * T; ++i) inputs.push_back((i * 11 + 3) % 53), targets.push_back((i * 7 + 5) % 53);
    targets[4] = -1;  // a token not counted
  }
};

// The whole model's gradient of tensor `name` summed over the stages that hold it.
std::vector<float> stage_grad(const std::vector<std::unique_ptr<Stage>>& stages, const ParamInfo& whole) {
  std::vector<float> sum(size_t(whole.numel), 0.0f);
  for (const auto& s : stages)
    if (const ParamInfo* p = s->table().try_find(whole.name))
      for (int64_t i = 0; i < p->numel; ++i) sum[size_t(i)] += s->grad(*p)[i];
  return sum;
}

void check_split(const ModelConfig& c, const std::vector<StageRange>& ranges, const MemoryOptions& memory) {
  SCOPED_TRACE(enum_name(kArchNames, c.arch) + std::string(c.tie_embeddings ? " tied" : ""));
  const Batch b;
  const float dloss = 1.0f / 33;
  const std::unique_ptr<Stage> whole_stage = make(c, {});
  Stage& whole = *whole_stage;
  init(whole, 5);
  whole.set_memory(memory);
  int64_t n_whole = 0;
  const double loss_whole =
      whole.forward_backward(b.inputs.data(), b.targets.data(), nullptr, b.B, b.T, dloss, &n_whole);

  std::vector<std::unique_ptr<Stage>> stages;
  std::vector<std::unique_ptr<StageActivations>> acts;
  std::vector<RecordingHooks> hooks(ranges.size());
  for (size_t s = 0; s < ranges.size(); ++s) {
    stages.push_back(make(c, ranges[s]));
    Stage& st = *stages.back();
    // A stage's table initialises to the whole model's values (init streams keyed by the whole index).
    init(st, 5);
    for (const ParamInfo& p : st.table().tensors()) {
      const ParamInfo& w = whole.table().find(p.name);
      ASSERT_EQ(p.shape, w.shape) << p.name;
      for (int64_t i = 0; i < p.numel; ++i)
        ASSERT_EQ(st.param(p)[i], whole.param(w)[i]) << p.name << " " << i;
    }
    st.set_memory(memory);
    st.set_hooks(&hooks[s]);
    acts.push_back(st.make_activations());
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    if (s > 0) acts[s]->input = acts[s - 1]->output();
    stages[s]->forward(*acts[s], s == 0 ? b.inputs.data() : nullptr, b.targets.data(), nullptr, b.B, b.T);
  }
  int64_t n = 0;
  const double loss = stages.back()->loss(*acts.back(), dloss, &n);
  for (size_t s = stages.size(); s-- > 0;) {
    if (s + 1 < stages.size()) acts[s]->output_grad = acts[s + 1]->input_grad();
    stages[s]->backward(*acts[s]);
  }
  EXPECT_EQ(loss, loss_whole);
  EXPECT_EQ(n, n_whole);
  for (size_t s = 0; s < stages.size(); ++s)
    EXPECT_EQ(hooks[s].seen, stages[s]->unit_schedule()) << "stage " << s;

  for (const ParamInfo& w : whole.table().tensors()) {
    const std::vector<float> got = stage_grad(stages, w);
    const float* want = whole.grad(w);
    if (!tied_embedding(c, w.name)) {
      for (int64_t i = 0; i < w.numel; ++i) ASSERT_EQ(got[size_t(i)], want[i]) << w.name << " " << i;
      continue;
    }
    double max_abs = 0;
    for (int64_t i = 0; i < w.numel; ++i) max_abs = std::max(max_abs, double(std::abs(want[i])));
    for (int64_t i = 0; i < w.numel; ++i)
      ASSERT_NEAR(got[size_t(i)], want[i], 1e-6 * max_abs) << w.name << " " << i;
  }
}

TEST(Stages, TwoStagesComputeTheWholeModel) {
  for (const ModelConfig& c : configs()) {
    check_split(c, {{0, 1}, {1, 4}}, {});
    check_split(c, {{0, 3}, {3, 4}}, {CheckpointPolicy::none, 5});
  }
}

TEST(Stages, FourStagesWithCheckpointing) {
  for (const ModelConfig& c : configs()) {
    check_split(c, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}, {CheckpointPolicy::full, 0});
    check_split(c, {{0, 2}, {2, 3}, {3, 4}}, {CheckpointPolicy::full, 7});
  }
}

TEST(Stages, TablesHoldTheirUnits) {
  const ModelConfig c = gpt2();
  const GPT2 first(c, false, {0, 2}), middle(c, false, {2, 3}), last(c, false, {3, -1});
  EXPECT_EQ(first.table().num_units(), 3);   // embeddings, 2 layers
  EXPECT_EQ(middle.table().num_units(), 1);  // 1 layer
  EXPECT_EQ(last.table().num_units(), 2);    // 1 layer, final norm + tied head
  EXPECT_NE(first.table().try_find("wpe"), nullptr);
  EXPECT_EQ(first.table().try_find("ln_f.weight"), nullptr);
  EXPECT_EQ(middle.table().try_find("wte"), nullptr);
  EXPECT_EQ(last.table().find("wte").unit, 1);
  EXPECT_EQ(last.table().try_find("wpe"), nullptr);
  EXPECT_EQ(last.range().layer_end, 4);
  EXPECT_EQ(middle.table().tensors().front().name, "h.2.ln_1.weight");
  EXPECT_EQ(middle.table().tensors().front().offset, 0);
  // The stages' tables hold every tensor of the model once, plus the tied head's copy of wte.
  const ParamTable whole(c);
  EXPECT_EQ(first.table().total() + middle.table().total() + last.table().total(),
            whole.total() + whole.find("wte").numel);
}

TEST(Stages, MisuseIsNamed) {
  const ModelConfig c = gpt2();
  EXPECT_THROW(GPT2(c, false, {2, 2}), Error);
  EXPECT_THROW(GPT2(c, false, {0, 5}), Error);
  EXPECT_THROW(GPT2(c, false, {-1, 2}), Error);
  GPT2 middle(c, true, {1, 2});
  auto acts = middle.make_activations();
  const Batch b;
  try {
    middle.forward(*acts, b.inputs.data(), b.targets.data(), nullptr, b.B, b.T);
    FAIL() << "a stage without embeddings ran without its input";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("acts.input"), std::string::npos) << e.what();
  }
  std::vector<float> x(size_t(b.B * b.T * c.d_model), 0.5f);
  acts->input = x.data();
  middle.forward(*acts, nullptr, nullptr, nullptr, b.B, b.T);
  EXPECT_THROW(middle.loss(*acts, 1.0f, nullptr), Error);
  EXPECT_THROW(middle.backward(*acts), Error);  // no output_grad
}

// index_unit_uses: GPT-2's tied whole-model schedule uses unit 0 twice forward (embeddings, then the
// head) and once backward; every other unit once each way, backward in reverse order.
TEST(Stages, IndexUnitUsesFindsEveryUse) {
  const std::vector<UnitUse> schedule = {{0, true},  {1, true},  {2, true}, {0, true},
                                         {0, false}, {2, false}, {1, false}};
  const UnitUses uses = index_unit_uses(schedule, 4);
  EXPECT_EQ(uses.forward[0], (std::vector<int>{0, 3}));
  EXPECT_EQ(uses.forward[1], (std::vector<int>{1}));
  EXPECT_EQ(uses.forward[2], (std::vector<int>{2}));
  EXPECT_TRUE(uses.forward[3].empty());
  EXPECT_EQ(uses.backward, (std::vector<int>{4, 6, 5, -1}));
}

}  // namespace
}  // namespace odyssey
