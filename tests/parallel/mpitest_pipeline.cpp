// Pipeline parallelism's runtime over the world as the pp group (np 1, 2, 4): GPT-2 (tied) and Llama
// (untied, GQA) with a layer count the stages do not divide, cut by split_layers into P v stages,
// every schedule (GPipe, 1F1B, zb1 with its deferred weight gradients; interleaved with v = 2 where
// m % P == 0), m micro-batches of odd shape:
// the summed loss equals the single-process accumulation bitwise, and so does every parameter
// gradient of every stage, except the tied embedding, whose first- and last-stage copies summed are
// within 1e-6 of the single process's (spec §3.7: the same terms in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/model/architecture.h"
#include "odyssey/parallel/pipeline.h"

namespace odyssey {
namespace {

constexpr int B = 2, T = 13, M = 4;

ModelConfig config(const std::string& arch) {
  ModelConfig c;
  c.arch = parse_enum(kArchNames, arch, "model.arch");
  // d_model 64: a hidden-state message (B T C floats, 6.6 KB) above Open MPI's eager limit, so a send
  // completes only once received (a runner that waited for one before receiving would deadlock).
  c.n_layer = 9, c.n_head = 4, c.d_model = 64, c.seq_len = 16, c.vocab_size = 41;
  if (arch != "gpt2") c.n_kv_head = 2, c.d_ff = 48;  // llama, qwen2
  return c;
}

struct Data {
  std::vector<std::vector<int>> inputs, targets;
  int64_t count = 0;
  Data() {
    std::mt19937 gen(3);
    std::uniform_int_distribution<int> tok(0, 40);
    for (int j = 0; j < M; ++j) {
      inputs.emplace_back(), targets.emplace_back();
      for (int i = 0; i < B * T; ++i) {
        inputs.back().push_back(tok(gen));
        targets.back().push_back(i % 5 == 2 ? -1 : tok(gen));
        count += targets.back().back() >= 0;
      }
    }
  }
  PipelineMicroBatch operator()(int j) const {
    return {inputs[size_t(j)].data(), targets[size_t(j)].data(), nullptr, B, T};
  }
};

std::unique_ptr<Stage> make(const ModelConfig& c, const StageRange& r) {
  auto s = architecture(c.arch).make_stage(c, r, true, {});
  init_parameters(s->params(), s->table(), c, 9);
  std::fill(s->grads(), s->grads() + s->table().total(), 0.0f);
  return s;
}

void check(const std::string& arch, PipelineSchedule schedule, int v) {
  Communicator& pp = world();
  const int P = pp.size(), r = pp.rank();
  const PipelineShape shape{P, v, M};
  if (schedule == PipelineSchedule::interleaved && M % P) return;
  SCOPED_TRACE(arch + " " + enum_name(kPipelineScheduleNames, schedule) + " P=" + std::to_string(P) +
               " v=" + std::to_string(v));
  const ModelConfig c = config(arch);
  const Data data;
  const float dloss = 1.0f / float(data.count);

  // The single process: the whole model, micro-batches accumulated in order.
  auto whole = make(c, {});
  double want = 0;
  for (int j = 0; j < M; ++j) {
    int64_t n = 0;
    const PipelineMicroBatch mb = data(j);
    want += whole->forward_backward(mb.inputs, mb.targets, nullptr, B, T, dloss, &n);
  }

  const auto ranges = split_layers(c.n_layer, P * v);
  std::vector<std::unique_ptr<Stage>> owned;
  std::vector<Stage*> chunks;
  for (int k = 0; k < v; ++k) {
    const auto [b, e] = ranges[size_t(k * P + r)];
    owned.push_back(make(c, {b, e}));
    chunks.push_back(owned.back().get());
  }
  PipelineRunner runner(pp, chunks, shape, schedule);
  int64_t count = 0;
  double loss = runner.run(data, dloss, &count);
  if (r == P - 1) {  // the last stage's rank has the loss
    EXPECT_EQ(loss, want);
    EXPECT_EQ(count, data.count);
  } else {
    EXPECT_EQ(count, 0);
  }

  // Tied embedding: the copies of the first and last stage, summed over the pp group.
  const std::string tied = arch == "gpt2" ? "wte" : "";
  for (Stage* s : chunks)
    for (const ParamInfo& p : s->table().tensors()) {
      const ParamInfo& w = whole->table().find(p.name);
      if (p.name == tied) continue;
      for (int64_t i = 0; i < p.numel; ++i) ASSERT_EQ(s->grad(p)[i], whole->grad(w)[i]) << p.name << " " << i;
    }
  if (tied.empty()) return;
  const ParamInfo& w = whole->table().find(tied);
  std::vector<float> sum(size_t(w.numel), 0.0f);
  for (Stage* s : chunks)
    if (const ParamInfo* p = s->table().try_find(tied))
      for (int64_t i = 0; i < p->numel; ++i) sum[size_t(i)] += s->grad(*p)[i];
  pp.all_reduce(sum.data(), sum.size(), DType::f32, ReduceOp::sum);
  float scale = 0;
  for (int64_t i = 0; i < w.numel; ++i) scale = std::max(scale, std::abs(whole->grad(w)[i]));
  for (int64_t i = 0; i < w.numel; ++i) ASSERT_NEAR(sum[size_t(i)], whole->grad(w)[i], 1e-6 * scale) << i;
}

TEST(Pipeline, EverySchedulesGivesTheSingleProcessStep) {
  for (const char* arch : {"gpt2", "llama", "qwen2"}) {
    check(arch, PipelineSchedule::gpipe, 1);
    check(arch, PipelineSchedule::one_f_one_b, 1);
    check(arch, PipelineSchedule::zb1, 1);
    if (world().size() > 1) check(arch, PipelineSchedule::interleaved, 2);
  }
}

}  // namespace
}  // namespace odyssey
