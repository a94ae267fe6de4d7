// ZeRO stages over data parallelism (Rajbhandari et al., 2020), on the flat buffers:
//   0  plain data parallelism: buckets all-reduced, every rank updates everything;
//   1  optimizer state sharded: buckets reduce-scattered on the last micro-step (the full gradient
//      buffer accumulates locally before), each rank updates its slices, then all-gathers parameters;
//   2  gradients sharded too: every micro-step reduce-scatters its buckets into a shard-sized
//      accumulator and the bucket buffers are freed as their reduction completes;
//   3  parameters sharded too: the model has no full buffers; each unit is all-gathered into a working
//      buffer before its forward and again before its backward, freed after use, the next unit
//      prefetched; a unit's gradients are reduce-scattered into the shard in after_backward.
// Stage 3 follows the stage's unit schedule (Stage::unit_schedule): each use prefetches the unit of
// the next use, and a unit whose next use follows at once is kept rather than released. For GPT-2,
// unit 0 (wte + wpe) is used at both ends: it is gathered for the embeddings and released, gathered
// again for the LM head and kept across the head's backward until the embedding backward is done —
// two gathers per micro-step like every other unit, so ZeRO-3 moves 3 Ψ per micro-step.
//
// Compressed communication (comm.*, parallel/comm_options.h): the parameter all-gather of stages 1-2
// becomes qWD (sdp4bit.h) or a block-quantized gather of a separate fp32 master shard (zeropp.h); the
// unit gathers of stage 3 become qwZ, with hpZ the backward ones run inside the node; the gradient
// reduce-scatter becomes a one-level or two-level quantized all-to-all reduction.
//
// Overlap (ZeroOptions::comm_thread): Open MPI's non-blocking collectives progress only inside MPI
// calls, so a gather or reduction started before a unit's compute moves nothing until the compute
// ends. With a communication thread (comm/comm_thread.h) the engine's unit gathers (fp32, qwZ, hpZ's
// intra-node ones) and bucket / unit gradient reductions (fp32, and the quantized ones as whole
// tasks: encode, exchange, decode) run on duplicates of dp and of the node groups, driven by the
// thread while the rank computes. The operations, their buffers and their order are those of the
// main-thread path, so the numbers are the same bit for bit. The parameter all-gather after the
// update (stages 1-2) stays on the main thread: nothing computes beside it.
//
// Sharding (parallel/shard.h): stages 1-2 shard per bucket, stage 3 per unit; each segment is padded
// to a multiple of dp. Ψ_pad = Σ padded segment sizes is what the bytes theory uses.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "odyssey/comm/comm_thread.h"
#include "odyssey/comm/communicator.h"
#include "odyssey/core/bf16.h"
#include "odyssey/model/stage.h"
#include "odyssey/optim/optimizer.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/reductions.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/zeropp.h"

namespace odyssey {

struct ZeroOptions {
  int stage = 0;
  double bucket_mb = 25;     // gradient bucket size (stages 0-2); stage 3 reduces per unit
  bool overlap = true;       // reduce buckets during backward (false: all after, for benchmarks)
  int max_in_flight = 2;     // stage 2/3: bucket reductions outstanding at once
  bool comm_thread = false;  // gathers and gradient reductions on a communication thread (needs
                             // MPI_THREAD_MULTIPLE; comm.overlap_thread)
  CommOptions comm;          // compressed collectives (default: none)
  // train.precision = bf16 (mixed-precision.md §6, §7): the model computes with a bf16 copy of the fp32
  // master weights, rounded (RNE) after every step; every weight gather carries bf16 (ZeRO 1-2 after the
  // step, ZeRO-3 per unit: half the bytes), gradients stay fp32 and are reduced in fp32.
  bool bf16 = false;
};

// What a ZeRO engine's collectives hold beside its state, its gathered units and its gradient buckets,
// from the sizes alone: the engine's buffers follow these rules and the footprint (train/footprint.h)
// counts by them (tests/train/mpitest_footprint.cpp compares the two).
class ZeroCommSizes {
 public:
  ZeroCommSizes(const ZeroOptions& options, int dp);
  // ZeRO-3: what a unit gather holds in flight beside the unit's fp32 copy of `padded` floats (from
  // shards of `shard` floats): qwZ's wire blocks, or bf16's rounded shard and gathered unit. forward
  // false under hpZ: the gather inside the node from its secondary shards.
  uint64_t unit_gather_bytes(int64_t shard, int64_t padded, bool forward) const;
  // hpZ: this rank's part of a unit of `padded` floats, kept from its forward gather to the step.
  int64_t secondary_floats(int64_t padded) const { return padded / D_; }
  // A compressed gradient reduce-scatter of a segment with `shard`-float shards: its wire blocks (0
  // without comm.grads).
  uint64_t reduction_bytes(int64_t shard) const;
  // Stages 1-2: the parameter gather after the step at its peak (quantized: one segment at a time; bf16:
  // the rounded local shard and the gathered model copy at once; fp32: in place, nothing).
  uint64_t weight_gather_bytes(const Partition& part) const;
  // The most reduction_bytes over the partition's segments and weight_gather_bytes: one collective's
  // scratch at a time (the main thread's or the communication thread's).
  uint64_t collective_peak(const Partition& part) const;
  bool two_level_grads() const { return two_level_; }

 private:
  ZeroOptions opt_;
  int dp_, D_;
  bool two_level_;
  WireFormat weights_, grads_intra_, grads_inter_;
};

// Bus bytes of the last optimizer step (its micro-steps and the update), per rank, by purpose and
// level, measured from CommStats.
struct CommTraffic {
  uint64_t weights_intra = 0, weights_inter = 0, grads_intra = 0, grads_inter = 0;
  // Divided by the parameter count: {"weights_intra": ..., ...}.
  nlohmann::json per_param_json(int64_t params) const;
};

// Per-rank bytes. params/grads/optimizer: persistent storage; comm_buffers: peak of gathered units,
// bucket buffers and receive scratch.
struct MemoryReport {
  uint64_t params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0;
  uint64_t total() const { return params + grads + optimizer + activations + comm_buffers; }
  nlohmann::json to_json() const;
};

// The engine's communication time over a step as the compute saw it.
struct ExposedComm {
  double exposed_seconds = 0;  // the compute blocked: waits for gathers and reductions, blocking calls
  // With the communication thread: the engine's collectives from start to completion (those on the
  // thread and the blocking ones of the main thread); without it 0 (not measurable apart from waits).
  double comm_seconds = 0;
  bool threaded = false;
  // The share of comm_seconds the compute did not wait for (threaded only).
  double hidden_fraction() const;
  ExposedComm& operator+=(const ExposedComm& o);
};

class ZeroEngine : public LayerHooks {
 public:
  // model must be built without storage (Stage::owns_storage); the engine owns its storage and
  // installs itself as the model's hooks. The optimizer's rule runs on this rank's slices; the engine
  // keeps its state (one local buffer per Optimizer::state_names()). Both must outlive the engine.
  ZeroEngine(Stage& model, Communicator& dp, const ZeroOptions& options, const Optimizer& optimizer);
  ~ZeroEngine() override;

  // Every rank passes the same full dense parameters (init or checkpoint) and optimizer state (one
  // dense buffer per state name; empty: zero); each keeps what its stage keeps. weights (has_weight_replica()
  // only; null: rebuilt from params): the full dense model-weight replica a checkpoint saved, which differs
  // from the master by the accumulated quantization error.
  void load(const float* params, std::span<const float* const> state = {}, const float* weights = nullptr);
  // The dense ranges of `params` that load() reads: this rank's shard under ZeRO-3 (the rest of the
  // buffer need not exist: zero pages), everything under stages 0-2 (parameters are replicated).
  std::vector<Range> param_ranges_loaded() const;
  // The optimizer steps completed (0 on a fresh start; a checkpoint's step on resume). The stochastic
  // rounding keys of the quantized collectives derive from the step, so a resumed run draws the same
  // rounding as an uninterrupted one.
  void set_completed_steps(int64_t steps);
  // Collective: the full dense master parameters on rank 0 (params is used on rank 0 only).
  void gather_params_to_root(float* params);

  void zero_grad();
  void begin_micro_step(bool last);
  void end_micro_step();
  // A forward run outside its micro-step (a pipeline's F, between other micro-batches' backwards):
  // what it sends (ZeRO-3's unit gathers) counts as the step's traffic as a micro-step's does.
  void begin_forward() { forward_start_ = snapshot(); }
  void end_forward() { add_traffic(forward_start_, true); }
  // This rank's gradients as a part of the global norm (parallel/reductions.h): the shard over dp
  // (stages >= 1) or the whole replicated buffer (stage 0). Valid after the last end_micro_step.
  GradNormPart grad_norm_part();
  // The same gradients as runs of dense elements [begin, end) of the table, with where they are: stage
  // 0 every element (each rank holds them all), stages >= 1 this rank's shard. Valid after the last
  // end_micro_step (pipeline parallelism sums a tied embedding's copies over these).
  struct GradRun {
    int64_t begin = 0, end = 0;
    float* grads = nullptr;
  };
  std::vector<GradRun> reduced_grad_runs();
  // The optimizer on this rank's elements, then (stages 1-2) the parameter all-gather.
  void step(float lr, int64_t step, float grad_scale);
  // Stages 1-2 on the communication thread leave the after-step all-gathers in flight for the next
  // step's forward to wait for; this completes them now (the last step of a run, which nothing follows).
  void wait_weight_gathers() const;

  MemoryReport memory() const;
  // Of memory().comm_buffers: the peak of ZeRO-3's gathered units (the rest is the gradient buckets').
  uint64_t peak_gathered_bytes() const { return uint64_t(peak_gathered_bytes_); }
  // Of memory().comm_buffers: the most wire buffers one compressed or bf16 collective held (the gradient
  // reduce-scatters, the parameter gather after the step; ZeroCommSizes::collective_peak).
  uint64_t peak_scratch_bytes() const { return peak_scratch_bytes_.load(); }
  const Partition& partition() const { return *part_; }
  // This rank's fp32 master state, for checkpoints. Parameters are in the local layout under stage 3
  // and under comm.weights (stages 1-2 keep a separate master shard, the replica being quantized),
  // else in the full padded layout; the moments are in the local layout (stage 0: the whole buffer).
  const float* param_storage() const {
    wait_weight_gathers();
    return master_.size() ? master_.data() : params_.data();
  }
  bool param_storage_local() const { return opt_.stage == 3 || master_.size() > 0; }
  const Optimizer& optimizer() const { return optimizer_; }
  // Optimizer state k (Optimizer::state_names()[k]), local layout.
  const float* state_storage(size_t k) const { return state_[k].data(); }
  int stage() const { return opt_.stage; }
  double grad_wait_seconds() const { return grads_->wait_seconds(); }
  bool comm_thread() const { return thread_ != nullptr; }
  // The communication times since the last call.
  ExposedComm take_exposed_comm();
  const CommTraffic& traffic() const { return traffic_; }
  // The weights the model computes with: stages 0-2 the full replica (padded layout), stage 3 the
  // local shard. Under comm.weights these differ from the master weights by one step's quantization.
  std::span<const float> model_weights() const {
    wait_weight_gathers();
    return {params_.data(), params_.size()};
  }
  // Stages 1-2 with comm.weights: the replica (model_weights(), padded layout) is not the master and
  // is checkpointed separately for exact resume. The bf16 copy is not: it is the master rounded (RNE),
  // rebuilt exactly on load.
  bool has_weight_replica() const { return master_.size() > 0 && !opt_.bf16; }
  bool bf16_model_copy() const { return opt_.bf16; }
  // The fp32 master held beside the model copy (stages 1-2 with comm.weights or bf16, stage 0 bf16).
  uint64_t master_bytes() const { return master_.bytes(); }
  // What determines the replica's quantization (dp, stage, sharding, weight format): a replica saved
  // under another fingerprint is not restored (the master rebuilds it).
  nlohmann::json replica_layout() const;

  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

 private:
  struct Gathered {
    FloatBuffer buf;  // the unit's padded segment
    RequestPtr request;
    QuantizedGather quantized;     // qwZ: in flight instead of request
    std::vector<bf16> send, recv;  // bf16: the shard rounded, the unit as gathered (widened into buf)
    uint64_t wire = 0;             // of them, the bytes held until the gather completes
    bool forward = false;          // hpZ: a full-group gather whose result seeds the secondary shard
  };
  // A stage 1-2 after-step all-gather of one segment, while in flight.
  struct WeightGather {
    RequestPtr request;
    const bf16* gathered = nullptr;  // bf16: the segment as gathered, widened into model once complete
    float* model = nullptr;
    size_t count = 0;
    void finish();  // waits for it, then widens
  };
  struct Snapshot {
    uint64_t gather[2], reduce[2];  // [inter, intra]
  };
  float* unit_params(int unit);
  int forward_use(int unit) const;  // the schedule position of unit's next forward use
  void prefetch_after(int position);
  void gather_start(int unit, bool forward);
  void gather_weights_after_step(int64_t step);
  RequestPtr reduce_scatter_compressed(const float* send, float* recv, size_t S, int segment);
  Communicator& gathers(bool secondary);  // where a unit gather runs (on the thread when there is one)
  void add_blocked(double seconds, bool collective);
  void gather_bf16_weights_after_step(std::vector<WeightGather>& gathers);
  void round_replica();  // stage 0 bf16: the model copy from the master
  Snapshot snapshot() const;
  void add_traffic(const Snapshot& before, bool gathers_are_weights);
  void acquire(int unit);
  void release(int unit);
  void release_all();  // nothing gathered (stage 3) nor in flight (the after-step gathers) remains
  void drop_secondaries();
  void track(int64_t delta);
  void note_scratch(uint64_t bytes);  // a collective's transient wire buffers (any thread)

  Stage& model_;
  Communicator& dp_;
  ZeroOptions opt_;
  ZeroCommSizes sizes_;
  // The communication thread and the communicators only it uses (duplicates of dp, intra_, inter_),
  // declared before everything whose requests run on it, so that those complete before it stops.
  std::unique_ptr<Communicator> dp_own_, intra_own_, inter_own_;
  std::unique_ptr<CommThread> thread_;
  std::unique_ptr<ThreadedCommunicator> dp_async_, intra_async_;
  double exposed_seconds_ = 0, main_comm_seconds_ = 0, grad_wait_mark_ = 0;
  std::unique_ptr<Partition> part_;
  FloatBuffer params_;  // stages 0-2: full, padded layout; stage 3: this rank's shard (local layout)
  const Optimizer& optimizer_;
  std::vector<FloatBuffer> state_;  // per optimizer state: stage 0 full; stages >= 1 local
  std::unique_ptr<GradSync> grads_;
  std::vector<Gathered> gathered_;  // stage 3, per unit
  // Stage 3: the model's unit schedule, where each unit is used in it, and per unit which of its
  // forward uses comes next.
  std::vector<UnitUse> schedule_;
  UnitUses uses_;
  std::vector<int> next_forward_;
  // ZeRO-3's gathered units with their gathers' wire buffers, and hpZ's secondary shards.
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  std::atomic<uint64_t> peak_scratch_bytes_{0};  // the most one collective held (ZeroCommSizes)
  // Stages 1-2 on the communication thread: per segment, its after-step all-gather still in flight
  // (empty when none is). Mutable: the replica's accessors complete them before handing it out.
  mutable std::vector<WeightGather> weight_gathers_;
  mutable std::vector<bf16> weight_send_, weight_recv_;  // bf16: the master shard rounded, the copy gathered

  // Compressed communication.
  std::unique_ptr<Communicator> intra_, inter_;  // the dp ranks on my node; those with my local index
  bool two_level_grads_ = false;                 // CommOptions::two_level_grads on this layout
  FloatBuffer master_;  // the fp32 master: stages 1-2 with comm.weights or bf16 (shard), stage 0 bf16 (whole)
  std::vector<FloatBuffer> secondary_;  // hpZ: per unit, my 1/D of it
  WireFormat weight_format_, grad_intra_format_, grad_inter_format_;
  uint32_t grad_round_ = 0, micro_ = 0;  // grad_round_: the optimizer step being computed (1-based)
  CommTraffic traffic_;
  Snapshot micro_start_{};
  Snapshot forward_start_{};  // begin_forward
};

}  // namespace odyssey
