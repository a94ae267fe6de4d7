// The footprint (train/footprint.h) against what a rank really allocates: for every layout of the world
// size (np 1, 2, 4: dp and ZeRO 0-3, buckets, quantized weights and gradients, hpZ, Ulysses, ring,
// hybrid, TP, TP-SP, Domino, PP 1F1B / interleaved / zb1, every checkpoint policy, row chunks, the disk
// tier; GPT-2's tied head, Llama's GQA, Qwen2; fp32 and bf16), each rank builds its part of the run
// (train/layout_builder.h), runs one training step on synthetic rows and compares, kind by kind, the
// pure function at its place with
// - the state its ZeRO engines allocated (byte for byte);
// - the activations the pipeline runner held at its peak, plus the attention op's scratch (Ulysses' and
//   the ring's bf16 messages with it), the GEMMs' scratch, the tensor-parallel linears' (TP-SP's
//   gathered inputs and partial sums, Domino's second slot) and the vocabulary-parallel ops' (byte for
//   byte);
// - the communication buffers: ZeRO-3's gathered units with their gathers' wire buffers (qwZ, bf16) and
//   hpZ's secondary shards byte for byte; the most one compressed or bf16 collective held (quantized
//   reduce-scatters one- and two-level, qwD, the weight gathers after the step) byte for byte; the
//   whole (with the gradient buckets and their receive scratch under every ZeRO stage, the scratch of
//   the tensor-parallel and tied-embedding gradient sums, and MPI's transient) byte for byte;
// - the disk tier's files: the built stages' (Stage::offload_bytes_for) per micro-batch held.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/parallel/sequence_shard.h"
#include "odyssey/train/footprint.h"
#include "odyssey/train/layout_builder.h"
#include "odyssey/train/run_checkpoint.h"
#include "odyssey/train/step_metrics.h"

using namespace odyssey;

namespace {

const char* kTiny = R"(
[model]
arch = "gpt2"
n_layer = 2
n_head = 4
d_model = 40
seq_len = 32
vocab_size = 256
[data]
train = "never-opened.bin"
[train]
global_batch = 8
micro_batch = 1
[checkpoint]
resume = false
)";

struct Case {
  const char* name;
  int ranks;
  std::vector<std::string> sets;
};

const std::vector<std::string> kLlama = {"model.arch=llama", "model.n_kv_head=2", "model.d_ff=72"};
const std::vector<std::string> kQwen2 = {"model.arch=qwen2", "model.n_kv_head=2", "model.d_ff=72",
                                         "model.tie_embeddings=false"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<Case> kCases = {
    {"single", 1, {"parallel.dp=1"}},
    {"single_zero3", 1, {"parallel.dp=1", "parallel.zero_stage=3"}},
    {"single_chunks", 1, {"parallel.dp=1", "memory.chunk_tokens=8", "memory.head_chunk_tokens=8"}},
    {"single_llama_chunks", 1, with({"parallel.dp=1", "memory.chunk_tokens=8"}, kLlama)},
    {"single_qwen2_zero2", 1, with({"parallel.dp=1", "parallel.zero_stage=2"}, kQwen2)},
    {"dp2_zero0", 2, {"parallel.dp=2"}},
    {"dp2_zero1_bucket", 2, {"parallel.dp=2", "parallel.zero_stage=1", "parallel.bucket_mb=0.01"}},
    {"dp2_zero2_qwd", 2, {"parallel.dp=2", "parallel.zero_stage=2", "comm.weights=qwd"}},
    {"dp2_zero2_bucket_int8",
     2,
     {"parallel.dp=2", "parallel.zero_stage=2", "parallel.bucket_mb=0.01", "comm.grads=int8"}},
    {"dp2_zero3", 2, {"parallel.dp=2", "parallel.zero_stage=3"}},
    {"dp2_zero3_llama", 2, with({"parallel.dp=2", "parallel.zero_stage=3"}, kLlama)},
    {"dp2_zero3_int4", 2, {"parallel.dp=2", "parallel.zero_stage=3", "comm.weights=int4"}},
    {"dp2_zero1_int8_weights_grads",
     2,
     {"parallel.dp=2", "parallel.zero_stage=1", "comm.weights=int8", "comm.grads=int4"}},
    {"dp2_zero3_bf16", 2, {"parallel.dp=2", "parallel.zero_stage=3", "train.precision=bf16"}},
    {"dp2_zero1_bf16", 2, {"parallel.dp=2", "parallel.zero_stage=1", "train.precision=bf16"}},
    {"ulysses2_bf16_chunks",
     2,
     {"parallel.dp=1", "parallel.sp_ulysses=2", "memory.chunk_tokens=4", "train.precision=bf16"}},
    {"ring2_bf16", 2, {"parallel.dp=1", "parallel.sp_ring=2", "train.precision=bf16"}},
    {"ulysses2_zero1", 2, {"parallel.dp=1", "parallel.sp_ulysses=2", "parallel.zero_stage=1"}},
    {"ulysses2_chunks", 2, {"parallel.dp=1", "parallel.sp_ulysses=2", "memory.chunk_tokens=4"}},
    {"ring2_zero3", 2, {"parallel.dp=1", "parallel.sp_ring=2", "parallel.zero_stage=3"}},
    {"ring2_llama", 2, with({"parallel.dp=1", "parallel.sp_ring=2"}, kLlama)},
    {"tp2_zero1", 2, {"parallel.dp=1", "parallel.tp=2", "parallel.zero_stage=1"}},
    {"tp2_sp_zero3", 2, {"parallel.dp=1", "parallel.tp=2", "parallel.tp_sp=true", "parallel.zero_stage=3"}},
    {"tp2_sp_chunks", 2, {"parallel.dp=1", "parallel.tp=2", "parallel.tp_sp=true", "memory.chunk_tokens=8"}},
    {"tp2_domino",
     2,
     {"parallel.dp=1", "parallel.tp=2", "parallel.tp_sp=true", "parallel.tp_overlap=domino",
      "parallel.domino_split=tokens", "memory.chunk_tokens=8"}},
    {"pp2_tied_zero0", 2, {"parallel.dp=1", "parallel.pp=2"}},
    {"pp2_llama_zero1", 2, with({"parallel.dp=1", "parallel.pp=2", "parallel.zero_stage=1"}, kLlama)},
    {"pp2_zb1", 2, {"parallel.dp=1", "parallel.pp=2", "parallel.pp_schedule=zb1"}},
    {"pp2_zero3", 2, {"parallel.dp=1", "parallel.pp=2", "parallel.zero_stage=3"}},
    {"pp2_qwen2_zb1", 2, with({"parallel.dp=1", "parallel.pp=2", "parallel.pp_schedule=zb1"}, kQwen2)},
    {"pp2_llama_zb1", 2, with({"parallel.dp=1", "parallel.pp=2", "parallel.pp_schedule=zb1"}, kLlama)},
    {"dp4_zero3_hpz",
     4,
     {"parallel.dp=4", "parallel.zero_stage=3", "comm.hpz=true", "parallel.ranks_per_node=2"}},
    {"dp4_zero2_tlq",
     4,
     {"parallel.dp=4", "parallel.zero_stage=2", "comm.grads=tlq", "parallel.ranks_per_node=2"}},
    {"dp4_zero3_hpz_int8_qgz",
     4,
     {"parallel.dp=4", "parallel.zero_stage=3", "comm.hpz=true", "comm.weights=int8", "comm.grads=qgz",
      "parallel.ranks_per_node=2"}},
    {"dp4_zero1_tlq_hs_sliced_int4",
     4,
     {"parallel.dp=4", "parallel.zero_stage=1", "comm.grads=tlq_hs", "comm.grad_pipeline=2",
      "comm.weights=int4", "parallel.ranks_per_node=2", "parallel.bucket_mb=0.01"}},
    {"dp4_zero3_bf16_llama", 4,
     with({"parallel.dp=4", "parallel.zero_stage=3", "train.precision=bf16"}, kLlama)},
    {"ulysses2_ring2_bf16",
     4,
     {"parallel.dp=1", "parallel.sp_ulysses=2", "parallel.sp_ring=2", "train.precision=bf16"}},
    {"dp2_ulysses2_zero2", 4, {"parallel.dp=2", "parallel.sp_ulysses=2", "parallel.zero_stage=2"}},
    {"hybrid_zero1",
     4,
     {"parallel.dp=1", "parallel.sp_ulysses=2", "parallel.sp_ring=2", "parallel.zero_stage=1"}},
    {"tp2_dp2_zero2", 4, {"parallel.dp=2", "parallel.tp=2", "parallel.zero_stage=2"}},
    {"tp4_llama_gqa_zero0", 4, with({"parallel.dp=1", "parallel.tp=4"}, kLlama)},
    {"pp2_dp2_zero1", 4, {"parallel.dp=2", "parallel.pp=2", "parallel.zero_stage=1"}},
    {"pp2v2_tp2_interleaved",
     4,
     {"parallel.dp=1", "parallel.pp=2", "parallel.tp=2", "parallel.pp_virtual=2",
      "parallel.pp_schedule=interleaved", "model.n_layer=4"}},
    {"pp2_ulysses2_zb1",
     4,
     {"parallel.dp=1", "parallel.pp=2", "parallel.sp_ulysses=2", "parallel.pp_schedule=zb1"}},
    // train.precision = bf16: the layers hold the policy's bf16 tensors in 2 bytes (model/block.h).
    {"single_bf16", 1, {"parallel.dp=1", "train.precision=bf16"}},
    {"single_chunks_bf16",
     1,
     {"parallel.dp=1", "memory.chunk_tokens=8", "memory.head_chunk_tokens=8", "train.precision=bf16"}},
    {"single_llama_chunks_bf16", 1,
     with({"parallel.dp=1", "memory.chunk_tokens=8", "train.precision=bf16"}, kLlama)},
    {"dp2_zero3_bf16", 2, {"parallel.dp=2", "parallel.zero_stage=3", "train.precision=bf16"}},
    {"ulysses2_chunks_bf16",
     2,
     {"parallel.dp=1", "parallel.sp_ulysses=2", "memory.chunk_tokens=4", "train.precision=bf16"}},
    {"ring2_llama_bf16", 2, with({"parallel.dp=1", "parallel.sp_ring=2", "train.precision=bf16"}, kLlama)},
    {"tp2_sp_chunks_bf16",
     2,
     {"parallel.dp=1", "parallel.tp=2", "parallel.tp_sp=true", "memory.chunk_tokens=8",
      "train.precision=bf16"}},
    {"tp2_domino_bf16",
     2,
     {"parallel.dp=1", "parallel.tp=2", "parallel.tp_sp=true", "parallel.tp_overlap=domino",
      "parallel.domino_split=tokens", "memory.chunk_tokens=8", "train.precision=bf16"}},
    {"pp2_tied_bf16", 2, {"parallel.dp=1", "parallel.pp=2", "train.precision=bf16"}},
    {"hybrid_zero1_bf16",
     4,
     {"parallel.dp=1", "parallel.sp_ulysses=2", "parallel.sp_ring=2", "parallel.zero_stage=1",
      "train.precision=bf16"}},
    {"pp2v2_tp2_interleaved_bf16",
     4,
     {"parallel.dp=1", "parallel.pp=2", "parallel.tp=2", "parallel.pp_virtual=2",
      "parallel.pp_schedule=interleaved", "model.n_layer=4", "train.precision=bf16"}},
};

const CheckpointPolicy kPolicies[] = {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                      CheckpointPolicy::keep_attention, CheckpointPolicy::full};

// Synthetic rows: every rank of a replica group the same tokens, positions as the sequence shard deals
// them.
class SyntheticRows : public MicroBatches {
 public:
  SyntheticRows(const Layout& layout) : config_(layout.config) {
    const int T = config_.seq_len();
    positions_ = shard_positions(T, layout.shard);
  }
  int rows() const override { return config_.train.micro_batch; }
  int local_len() const override { return int(positions_.size()); }
  const int* positions() const override { return positions_.data(); }
  void load(int64_t step, int micro, int* inputs, int* targets) override {
    const int V = config_.model.vocab_size;
    for (int r = 0; r < rows(); ++r)
      for (int i = 0; i < local_len(); ++i) {
        const int64_t t = int64_t(step) * 7919 + micro * 131 + r * 31 + positions_[size_t(i)];
        inputs[r * local_len() + i] = int((t * 17) % V);
        targets[r * local_len() + i] = int((t * 17 + 5) % V);
      }
  }

 private:
  const RunConfig& config_;
  std::vector<int> positions_;
};

void check_case(const Case& c, CheckpointPolicy policy, bool disk, Communicator& world) {
  std::vector<std::string> sets = c.sets;
  sets.push_back(std::string("memory.checkpoint=") + enum_name(kCheckpointPolicyNames, policy));
  if (disk) sets.push_back("memory.tier=disk"), sets.push_back("memory.offload_dir=/tmp");
  const RunConfig config = parse_run_config(kTiny, c.name, sets);
  config.validate(world.size());
  Layout layout(config, world);
  const RankFootprint pure = rank_footprint(config, layout.place(), policy);
  // The layout computes it once per policy, and the live report (asked every step) reads that.
  const RankFootprint& kept = layout.footprint(policy);
  EXPECT_EQ(&kept, &layout.footprint(policy));
  const MemoryReport report = live_memory(layout);
  EXPECT_EQ(report.params, pure.state.params);
  EXPECT_EQ(report.activations, pure.activations);
  EXPECT_EQ(report.comm_buffers, pure.comm_buffers);
  if (disk) layout.start_offload(pure.offload);
  resume_or_init(layout);
  SyntheticRows rows(layout);
  StepSettings settings;
  settings.micro_steps = layout.shape.m;
  settings.dloss = 1.0f / float(int64_t(config.train.global_batch) * config.seq_len());
  train_step(layout.step, rows, layout.replicas(), settings, 0, 1e-3f);

  // State.
  StateBytes live;
  uint64_t engines = 0, gathered = 0;
  for (const auto& engine : layout.engines) {
    const MemoryReport m = engine->memory();
    live.params += m.params, live.grads += m.grads, live.optimizer += m.optimizer;
    engines += m.comm_buffers, gathered += engine->peak_gathered_bytes();
  }
  EXPECT_EQ(pure.state.params, live.params);
  EXPECT_EQ(pure.state.grads, live.grads);
  EXPECT_EQ(pure.state.optimizer, live.optimizer);
  // Activations.
  const ModelConfig& mc = config.model;
  const uint64_t activations = layout.runner->peak_activation_bytes() +
                               layout.stages.front()->attention_bytes() +
                               gemm_scratch_bytes(std::max(mc.d_model, mc.ffn_dim())) +
                               (layout.tp_linears ? layout.tp_linears->bytes() : 0) +
                               (layout.tp_vocab ? layout.tp_vocab->scratch_bytes() : 0) +
                               (layout.bf16_linears ? layout.bf16_linears->native_bytes() : 0);
  EXPECT_EQ(pure.activations, activations);
  // Communication buffers.
  uint64_t sums = layout.step.scratch.bytes();
  for (const TpGradients& g : layout.step.tp) sums += g.scratch.bytes();
  const uint64_t comm = engines + layout.reduction_transient_bytes() + sums;
  EXPECT_EQ(pure.gathered_units, gathered);
  EXPECT_EQ(pure.comm_buffers, comm);
  // The disk tier (one chunk per rank here: the runner's peak of micro-batches held is its slots).
  uint64_t offload = 0;
  for (const auto& stage : layout.stages)
    offload += stage->offload_bytes_for(config.train.micro_batch, config.seq_len() / layout.grid.sp().size());
  EXPECT_EQ(pure.offload, disk ? offload * uint64_t(layout.runner->peak_in_flight()) : 0);
}

}  // namespace

TEST(Footprint, EqualsWhatEveryLayoutAllocates) {
  Communicator& world = odyssey::world();
  int checked = 0;
  for (const Case& c : kCases) {
    if (c.ranks != world.size()) continue;
    for (CheckpointPolicy policy : kPolicies) {
      const bool domino =
          std::find(c.sets.begin(), c.sets.end(), "parallel.tp_overlap=domino") != c.sets.end();
      if (domino && !runtime_thread_multiple()) continue;
      if (domino && (policy == CheckpointPolicy::keep_attention || policy == CheckpointPolicy::full))
        continue;
      SCOPED_TRACE(std::string(c.name) + " " + enum_name(kCheckpointPolicyNames, policy));
      check_case(c, policy, false, world);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Footprint, DiskTierEqualsTheStagesFiles) {
  Communicator& world = odyssey::world();
  for (const Case& c : kCases) {
    if (c.ranks != world.size() || std::string(c.name).find("pp2v2") != std::string::npos) continue;
    if (std::find(c.sets.begin(), c.sets.end(), "parallel.tp_overlap=domino") != c.sets.end()) continue;
    for (CheckpointPolicy policy : {CheckpointPolicy::keep_attention, CheckpointPolicy::full}) {
      SCOPED_TRACE(std::string(c.name) + " disk " + enum_name(kCheckpointPolicyNames, policy));
      check_case(c, policy, true, world);
    }
  }
}
