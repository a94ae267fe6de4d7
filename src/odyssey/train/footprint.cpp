#include "odyssey/train/footprint.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/comm/mpi_communicator.h"
#include "odyssey/core/error.h"
#include "odyssey/core/tensor_view.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/block_stage.h"
#include "odyssey/model/lm_head.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/pipeline_grads.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/tp_grads.h"
#include "odyssey/parallel/tp_linear.h"
#include "odyssey/parallel/usp_attention.h"
#include "odyssey/parallel/vocab_parallel.h"
#include "odyssey/train/layout_builder.h"

namespace odyssey {

StateBytes engine_state_bytes(const ParamTable& table, const ZeroOptions& options, int replicas, int rank,
                              int optimizer_states) {
  // As ZeroEngine's constructor partitions (parallel/zero.cpp): stage 0 shards nothing (a one-rank
  // partition whose local layout is the whole buffer).
  const int stage = options.stage;
  const bool sharded = stage > 0;
  const int64_t bucket_bytes = stage == 3 ? 0 : int64_t(options.bucket_mb * 1e6);
  const Partition part(table, build_buckets(table, bucket_bytes), sharded ? replicas : 1, sharded ? rank : 0,
                       comm_shard_align(options.comm));
  // fp32 master weights, gradients and moments (train.precision = fp32; bf16 will count its own).
  const uint64_t f32 = dtype_size(DType::f32), local = uint64_t(part.local_total());
  const uint64_t padded = uint64_t(part.padded_total());
  StateBytes s;
  s.params = f32 * (stage == 3 ? local : padded);
  if ((stage == 1 || stage == 2) && options.comm.weights != WeightComm::none) s.params += f32 * local;
  // bf16: the fp32 master beside the model copy (the copy held as fp32 values today, model/bf16_linears.h).
  if (stage <= 2 && options.bf16) s.params += f32 * local;
  // (hpZ's secondary shards live from a forward to the next update: counted with the gathered units.)
  s.grads = (stage >= 2 ? 0 : f32 * padded) + (sharded ? f32 * local : 0);
  s.optimizer = f32 * local * uint64_t(optimizer_states);
  return s;
}

ZeroOptions zero_options(const RunConfig& config) {
  ZeroOptions zo;
  zo.stage = config.parallel.zero_stage;
  zo.bucket_mb = config.parallel.bucket_mb;
  zo.comm.weights = config.comm.weights;
  zo.comm.grads = config.comm.grads;
  zo.comm.hpz = config.comm.hpz;
  zo.comm.grad_pipeline = config.comm.grad_pipeline;
  zo.comm.seed = config.train.seed;
  zo.bf16 = config.train.precision == Precision::bf16;
  return zo;
}

bool zero_comm_thread(OverlapThread mode, int replicas, int replicas_on_node, bool thread_multiple) {
  switch (mode) {
    case OverlapThread::off:
      return false;
    case OverlapThread::on:
      return replicas > 1;
    case OverlapThread::automatic:
      return replicas > replicas_on_node && thread_multiple;
  }
  return false;
}

namespace {

constexpr int kAdamWStates = 2;  // m and v

// The stage table of the layers of `range`, cut for tp piece r of t, built once per (model, layers,
// piece) and kept until the process ends: the planner's search sizes thousands of layouts of one model,
// and rebuilding an 80-layer table for each was most of its time. model_key: the model's record
// (model_config_to_json), which names it whole. Locked: any thread may ask.
const ParamTable& stage_table(const std::string& model_key, const ModelConfig& model, const StageRange& range,
                              int t, int r) {
  using Key = std::tuple<std::string, int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<const ParamTable>> cache;
  const StageRange resolved = range.resolved(model);
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<const ParamTable>& table =
      cache[Key{model_key, resolved.layer_begin, resolved.layer_end, t, r}];
  if (!table) {
    ParamTable whole = architecture(model.arch).stage_table(model, resolved);
    table = std::make_unique<const ParamTable>(t > 1 ? whole.tensor_parallel(t, r) : std::move(whole));
  }
  return *table;
}

int replicas_of(const RunConfig& c, const RankPlace& place) {
  if (place.replicas > 0) return place.replicas;
  ODY_CHECK(c.parallel.dp > 0, "footprint: parallel.dp must be given (it is {}: derived from a world size)",
            c.parallel.dp);
  return c.parallel.dp * c.parallel.sp_ulysses * c.parallel.sp_ring;
}

// What every place of a layout shares, computed once: the stages' layer ranges, the pipeline's action
// tables, the tokens per rank, the tensor-parallel split and the attention op's sizes, as the layout
// builder (train/layout_builder.cpp) makes them.
struct LayoutSizes {
  LayoutSizes(const RunConfig& config, int replicas_) : c(config), arch(architecture(config.model.arch)) {
    const ParallelConfig& pc = c.parallel;
    replicas = replicas_;
    const int sp = pc.sp_ulysses * pc.sp_ring;
    shape = pipeline_shape(c, replicas / sp);
    ranges = stage_ranges(c);
    tables = build_schedule(pipeline_schedule(c), shape);
    B = c.train.micro_batch;
    T = c.seq_len() / sp;
    const int t = pc.tp;
    split = TpSplit{t, t > 1 && pc.tp_sp, t > 1 && pc.tp_overlap == TpOverlap::domino};
    vocab_rows = t > 1 ? padded_vocab(c.model.vocab_size, t) / t : c.model.vocab_size;
    // The key/value heads of a tp rank: its share, or the one it holds when they are replicated.
    const int K = c.model.kv_heads(), kv_local = K % t == 0 ? K / t : 1;
    if (sp > 1) {
      attention = std::make_unique<SpAttentionSizes>(pc.sp_ulysses, pc.sp_ring, sp_attention_options(c, t));
    } else {
      attention = std::make_unique<LocalAttention>(kv_local);
    }
  }

  MemoryOptions memory(CheckpointPolicy policy) const {
    return MemoryOptions{policy, c.memory.head_chunk_tokens,          c.layer_chunk_rows(), c.memory.tier,
                         "",     c.train.precision == Precision::bf16};  // bf16: 2-byte activations
  }
  StageRange range(int chunk, int pp) const {
    const auto [begin, end] = ranges[size_t(chunk * shape.P + pp)];
    return StageRange{begin, end}.resolved(c.model);
  }
  const ParamTable& table(const StageRange& range, int tp) const {
    return stage_table(model_key, c.model, range, c.parallel.tp, tp);
  }

  const RunConfig& c;
  const Architecture& arch;
  const std::string model_key = model_config_to_json(c.model).dump();  // stage_table's
  int replicas = 1;
  PipelineShape shape;
  std::vector<std::pair<int, int>> ranges;
  std::vector<std::vector<PipeAction>> tables;
  int B = 1, T = 1;
  TpSplit split;
  int64_t vocab_rows = 0;
  std::unique_ptr<AttentionSizing> attention;
};

// One stage (model chunk) of the rank: its table, what a micro-batch of it holds, and its place.
struct ChunkSizes {
  StageRange range;
  const ParamTable* table = nullptr;  // stage_table's
  StageMemory memory;                 // one micro-batch (block_stage_memory)
  uint64_t hidden = 0;                // a received hidden state or its gradient [rows(B T), C]
  uint64_t deferred = 0;              // zb1: an I's recorded weight-GEMM operands
  bool first = false, last = false;
};

// The pipeline runner's holdings over this rank's action table (parallel/pipeline.cpp, track_in_flight):
// after each F and each I, the micro-batch stages in flight (activations, and a received hidden state
// on a stage after the first, d(output) during an I on a stage before the last) and the deferred
// operands of I's whose W has not run. Also the most micro-batches each chunk holds at once.
struct PipelineHoldings {
  uint64_t peak = 0;
  std::vector<int> slots;  // per chunk
};

PipelineHoldings replay_pipeline(const std::vector<PipeAction>& actions, const PipelineShape& shape,
                                 const std::vector<ChunkSizes>& chunks) {
  PipelineHoldings h;
  h.slots.assign(chunks.size(), 0);
  // (chunk, mb) -> bytes, and their sum kept as they change (summing the maps at every action made a
  // GPipe replay quadratic in the micro-batches: all m are in flight after the forwards).
  std::map<std::pair<int, int>, uint64_t> in_flight, deferred;
  uint64_t bytes = 0;
  auto hold = [&](std::map<std::pair<int, int>, uint64_t>& held_by, std::pair<int, int> key, uint64_t b) {
    uint64_t& slot = held_by[key];
    bytes = bytes - slot + b;
    slot = b;
  };
  auto drop = [&](std::map<std::pair<int, int>, uint64_t>& held_by, std::pair<int, int> key) {
    const auto it = held_by.find(key);
    if (it != held_by.end()) bytes -= it->second, held_by.erase(it);
  };
  std::vector<int> held(chunks.size(), 0);
  auto track = [&] { h.peak = std::max(h.peak, bytes); };
  for (const PipeAction& a : actions) {
    const int chunk = shape.chunk_of(a.stage);
    const ChunkSizes& cs = chunks[size_t(chunk)];
    const std::pair<int, int> key{chunk, a.mb};
    if (a.kind == PipeAction::forward) {
      hold(in_flight, key, cs.memory.activations + (cs.first ? 0 : cs.hidden));
      h.slots[size_t(chunk)] = std::max(h.slots[size_t(chunk)], ++held[size_t(chunk)]);
      track();
    } else if (a.kind == PipeAction::weight) {
      drop(deferred, key);
    } else {
      if (a.kind == PipeAction::input) {
        hold(deferred, key, cs.deferred);
        hold(in_flight, key, in_flight[key] + (cs.last ? 0 : cs.hidden));
        track();
      }
      drop(in_flight, key);
      --held[size_t(chunk)];
    }
  }
  return h;
}

// A ZeRO engine's communication buffers over the chunk's actions (parallel/zero.cpp,
// parallel/data_parallel.cpp), driven by the hooks the stage calls: ZeRO-3's gathered units (gathered at
// a use or prefetched at the use before it, released after the use unless the next use is the same
// unit) with their gathers' wire buffers until the use begins, and hpZ's secondary shards (one per unit
// from its first forward to the step); pooled (ZeRO 2-3), the gradient buckets (held from their first
// backward use until their reduction completes) and the receive scratch of a micro-step after the
// step's first; and the most one compressed or bf16 collective holds (ZeroCommSizes::collective_peak).
// A reduction completes when the engine must wait for it (max_in_flight reached, the micro-step's end),
// as GradSync releases its buffers (parallel/data_parallel.h): the same bytes.
class EngineReplay {
 public:
  EngineReplay(const ParamTable& table, const std::vector<UnitUse>& schedule, const ZeroOptions& options,
               int replicas, int rank)
      : part_(table, build_buckets(table, options.stage == 3 ? 0 : int64_t(options.bucket_mb * 1e6)),
              options.stage > 0 ? replicas : 1, options.stage > 0 ? rank : 0, comm_shard_align(options.comm)),
        schedule_(schedule),
        sizes_(options, replicas),
        stage_(options.stage),
        stage3_(options.stage == 3),
        hpz_(options.comm.hpz),
        pooled_(options.stage >= 2),
        every_micro_step_(options.stage >= 2),
        sharded_(options.stage > 0),
        max_in_flight_(options.max_in_flight) {
    const size_t units = size_t(table.num_units());
    gathered_.assign(units, 0);
    uses_ = index_unit_uses(schedule_, table.num_units());
    next_forward_.assign(units, 0);
    for (int i = 0; i < int(schedule_.size()) && first_backward_ < 0; ++i)
      if (!schedule_[size_t(i)].forward) first_backward_ = i;
    bucket_.assign(part_.segments().size(), 0);
    wire_.assign(units, 0);
    gathered_forward_.assign(units, false);
    secondary_.assign(units, false);
    scratch_peak_ = sizes_.collective_peak(part_);
  }

  uint64_t peak() const { return gathered_peak_ + grads_peak_ + scratch_peak_; }
  uint64_t gathered_peak() const { return gathered_peak_; }
  // The dense elements whose reduced gradients the engine holds after the step's reductions.
  std::vector<Range> grad_runs() const { return reduced_grad_ranges(part_, stage_); }

  void zero_grad() { shard_written_ = false; }
  // F of a micro-batch, B (or I) of a micro-batch (one micro-step), zb1's last W. A call made from the
  // state an earlier call of the same kind started from repeats it exactly (the same buffers, so the
  // same peaks and the same end): its end is restored instead of replaying it. Between calls the engine
  // holds little (a prefetched unit, a pooled bucket, reductions in flight), so a step of m
  // micro-batches walks the units a few times, not m times (4,096 layers x 65,536 micro-batches under
  // ZeRO-3: 9 s of dry run before).
  void forward(bool with_loss) {
    call(with_loss ? 1 : 0, [&] { run_forward(with_loss); });
  }
  void backward(bool has_head, bool head_in_unit0, bool last) {
    call(2 + int(has_head) + 2 * int(head_in_unit0) + 4 * int(last),
         [&] { run_backward(has_head, head_in_unit0, last); });
  }
  void last_weight() {
    call(10, [&] { run_last_weight(); });
  }

 private:
  // The engine between two calls: the units gathered (with whether for a forward use) and their gathers'
  // wire buffers, the buckets pooled (nonzero entries only), the reductions in flight and the scalars.
  // (next_forward_ is back at 0 after every forward. hpZ's secondary shards are not in it: under hpZ
  // every call is replayed.)
  struct Between {
    std::vector<std::pair<int, uint64_t>> gathered, buckets, in_flight, wire;
    std::vector<int> gathered_for_forward;
    int64_t gathered_now = 0, grads_now = 0;
    bool reduce_now = true, shard_written = false;
  };
  struct Replayed {
    int call;
    Between before, after;
  };
  static constexpr size_t kMaxReplayed = 64;  // past it calls are replayed, not remembered

  Between between() const {
    Between b{{}, {}, in_flight_, {}, {}, gathered_now_, grads_now_, reduce_now_, shard_written_};
    for (size_t u = 0; u < gathered_.size(); ++u) {
      if (gathered_[u]) b.gathered.emplace_back(int(u), gathered_[u]);
      if (gathered_[u] && gathered_forward_[u]) b.gathered_for_forward.push_back(int(u));
      if (wire_[u]) b.wire.emplace_back(int(u), wire_[u]);
    }
    for (size_t s = 0; s < bucket_.size(); ++s)
      if (bucket_[s]) b.buckets.emplace_back(int(s), bucket_[s]);
    return b;
  }
  // Whether the engine is in state b: the sums equal and b's entries held, so no other entry is (every
  // entry is > 0; gathered_now_ is the gathered units' bytes plus their wire buffers, grads_now_ the
  // buckets' bytes plus the in-flight scratch).
  bool in(const Between& b) const {
    if (gathered_now_ != b.gathered_now || grads_now_ != b.grads_now || reduce_now_ != b.reduce_now ||
        shard_written_ != b.shard_written || in_flight_ != b.in_flight)
      return false;
    for (const auto& [u, bytes] : b.gathered)
      if (gathered_[size_t(u)] != bytes) return false;
    for (const auto& [u, bytes] : b.wire)
      if (wire_[size_t(u)] != bytes) return false;
    size_t for_forward = 0;
    for (const auto& [u, bytes] : b.gathered) for_forward += gathered_forward_[size_t(u)] ? 1 : 0;
    if (for_forward != b.gathered_for_forward.size()) return false;
    for (int u : b.gathered_for_forward)
      if (!gathered_forward_[size_t(u)]) return false;
    for (const auto& [s, bytes] : b.buckets)
      if (bucket_[size_t(s)] != bytes) return false;
    return true;
  }
  template <typename Run>
  void call(int kind, Run&& run) {
    for (const Replayed& r : replayed_)
      if (r.call == kind && in(r.before)) {
        for (const auto& [u, bytes] : r.before.gathered) gathered_[size_t(u)] = 0;
        for (const auto& [u, bytes] : r.before.wire) wire_[size_t(u)] = 0;
        for (const auto& [s, bytes] : r.before.buckets) bucket_[size_t(s)] = 0;
        for (const auto& [u, bytes] : r.after.gathered)
          gathered_[size_t(u)] = bytes, gathered_forward_[size_t(u)] = false;
        for (int u : r.after.gathered_for_forward) gathered_forward_[size_t(u)] = true;
        for (const auto& [u, bytes] : r.after.wire) wire_[size_t(u)] = bytes;
        for (const auto& [s, bytes] : r.after.buckets) bucket_[size_t(s)] = bytes;
        in_flight_ = r.after.in_flight;
        gathered_now_ = r.after.gathered_now, grads_now_ = r.after.grads_now;
        reduce_now_ = r.after.reduce_now, shard_written_ = r.after.shard_written;
        return;
      }
    if (hpz_ || replayed_.size() == kMaxReplayed) return run();
    Replayed r{kind, between(), {}};
    run();
    r.after = between();
    replayed_.push_back(std::move(r));
  }

  // F: the forward uses (only ZeRO-3 gathers in them); a last stage's loss begins the head's backward use.
  void run_forward(bool with_loss) {
    if (stage3_)
      for (const UnitUse& use : schedule_)
        if (use.forward) before_forward(use.unit), after_forward(use.unit);
    if (with_loss) before_backward(first_backward().unit);
  }
  // B or I: the backward uses as the stage makes them (the first begun by the loss on a stage with the
  // head; a tied head sharing the embeddings' unit ends its use after the embedding backward).
  void run_backward(bool has_head, bool head_in_unit0, bool last) {
    begin_micro_step(last);
    // ZeRO 0-1 before the step's last micro-step neither gathers nor reduces: no buffer moves.
    if (!stage3_ && !reduce_now_) return;
    bool first = true;
    for (const UnitUse& use : schedule_) {
      if (use.forward) continue;
      if (!(first && has_head)) before_backward(use.unit);
      if (!(first && head_in_unit0)) after_backward(use.unit);
      first = false;
    }
    if (head_in_unit0) after_backward(first_backward().unit);
    finish();
  }
  // W (zb1's last): the step's gradients complete, every unit's backward use ended.
  void run_last_weight() {
    begin_micro_step(true);
    for (const UnitUse& use : schedule_)
      if (!use.forward) after_backward(use.unit);
    finish();
  }

 private:
  const UnitUse& first_backward() const { return schedule_[size_t(first_backward_)]; }
  uint64_t padded_bytes(int segment) const {
    return uint64_t(part_.segments()[size_t(segment)].layout.padded) * dtype_size(DType::f32);
  }
  void gathered(int64_t delta) {
    gathered_now_ += delta;
    gathered_peak_ = std::max(gathered_peak_, uint64_t(gathered_now_));
  }
  void buffers(int64_t delta) {
    grads_now_ += delta;
    grads_peak_ = std::max(grads_peak_, uint64_t(grads_now_));
  }
  void gather(int unit, bool forward) {
    uint64_t& g = gathered_[size_t(unit)];
    if (g) return;
    const Partition::Segment& seg = part_.segments()[size_t(part_.segment_of_unit(unit))];
    g = padded_bytes(part_.segment_of_unit(unit));
    wire_[size_t(unit)] = sizes_.unit_gather_bytes(seg.layout.shard, seg.layout.padded, forward);
    gathered_forward_[size_t(unit)] = forward;
    gathered(int64_t(g + wire_[size_t(unit)]));
  }
  // The gather completes: its wire buffers go; hpZ keeps its part of a forward-gathered unit.
  void acquire(int unit) {
    gathered(-int64_t(wire_[size_t(unit)]));
    wire_[size_t(unit)] = 0;
    if (!hpz_ || !gathered_forward_[size_t(unit)] || secondary_[size_t(unit)]) return;
    secondary_[size_t(unit)] = true;
    const int64_t padded = part_.segments()[size_t(part_.segment_of_unit(unit))].layout.padded;
    gathered(int64_t(uint64_t(sizes_.secondary_floats(padded)) * dtype_size(DType::f32)));
  }
  void release(int unit) {
    gathered(-int64_t(gathered_[size_t(unit)] + wire_[size_t(unit)]));
    gathered_[size_t(unit)] = 0;
    wire_[size_t(unit)] = 0;
  }
  void prefetch_after(int position) {
    if (position + 1 < int(schedule_.size())) {
      const UnitUse& next = schedule_[size_t(position) + 1];
      gather(next.unit, next.forward);
    }
  }
  int forward_use(int unit) const { return uses_.forward[size_t(unit)][size_t(next_forward_[size_t(unit)])]; }
  void before_forward(int unit) {
    if (!stage3_) return;
    gather(unit, true);
    acquire(unit);
    prefetch_after(forward_use(unit));
  }
  void after_forward(int unit) {
    if (!stage3_) return;
    const int position = forward_use(unit);
    int& next = next_forward_[size_t(unit)];
    next = (next + 1) % int(uses_.forward[size_t(unit)].size());
    const bool kept = position + 1 < int(schedule_.size()) && schedule_[size_t(position) + 1].unit == unit;
    if (!kept) release(unit);
  }
  void before_backward(int unit) {
    if (stage3_) gather(unit, false), acquire(unit), prefetch_after(uses_.backward[size_t(unit)]);
    if (!pooled_) return;
    const int s = part_.segment_of_unit(unit);
    if (bucket_[size_t(s)]) return;
    while (int(in_flight_.size()) >= max_in_flight_) complete_oldest();
    bucket_[size_t(s)] = padded_bytes(s);
    buffers(int64_t(bucket_[size_t(s)]));
  }
  void after_backward(int unit) {
    const int s = part_.segment_of_unit(unit);
    if (reduce_now_ && unit == part_.segments()[size_t(s)].unit_begin) {
      // The first reduction of a step lands in the shard; later micro-steps receive into scratch.
      const uint64_t scratch =
          sharded_ && shard_written_
              ? uint64_t(part_.segments()[size_t(s)].layout.shard) * dtype_size(DType::f32)
              : 0;
      buffers(int64_t(scratch));
      in_flight_.push_back({s, scratch});
    }
    if (stage3_) release(unit);
  }
  void begin_micro_step(bool last) { reduce_now_ = every_micro_step_ || last; }
  void complete_oldest() {
    const auto [s, scratch] = in_flight_.front();
    in_flight_.erase(in_flight_.begin());
    buffers(-int64_t(scratch));
    if (pooled_) buffers(-int64_t(bucket_[size_t(s)])), bucket_[size_t(s)] = 0;
  }
  void finish() {
    while (!in_flight_.empty()) complete_oldest();
    if (reduce_now_ && sharded_) shard_written_ = true;
  }

  Partition part_;
  std::vector<UnitUse> schedule_;
  ZeroCommSizes sizes_;
  int stage_;
  bool stage3_, hpz_, pooled_, every_micro_step_, sharded_;
  int max_in_flight_;
  std::vector<uint64_t> gathered_;  // per unit: its gathered copy's bytes (0: not held)
  std::vector<uint64_t> wire_;      // per unit: its gather's wire buffers (until the gather completes)
  std::vector<bool> gathered_forward_, secondary_;  // per unit: gathered for a forward use; hpZ's shard held
  UnitUses uses_;
  std::vector<int> next_forward_;
  int first_backward_ = -1;                          // the schedule's first backward use (a loss begins it)
  std::vector<uint64_t> bucket_;                     // per segment: its pooled bucket's bytes (0: none)
  std::vector<std::pair<int, uint64_t>> in_flight_;  // reductions launched: (segment, scratch bytes)
  bool reduce_now_ = true, shard_written_ = false;
  int64_t gathered_now_ = 0, grads_now_ = 0;
  uint64_t gathered_peak_ = 0, grads_peak_ = 0, scratch_peak_ = 0;
  std::vector<Replayed> replayed_;
};

// The engines over a step of this rank's actions, one per chunk.
struct EngineBytes {
  uint64_t peak = 0;                          // their peaks summed (as the engines report them)
  uint64_t gathered = 0;                      // of that, ZeRO-3's gathered units
  std::vector<std::vector<Range>> grad_runs;  // per chunk: the reduced gradients it holds
};
EngineBytes replay_engines(const LayoutSizes& L, const RankPlace& place,
                           const std::vector<ChunkSizes>& chunks) {
  const RunConfig& c = L.c;
  ZeroOptions zo = zero_options(c);
  zo.comm.ranks_per_node = place.replicas_on_node;  // as the layout builder's zero_options(config, grid)
  const char* tied = L.arch.tied_head(c.model);
  std::vector<EngineReplay> engines;
  for (const ChunkSizes& cs : chunks)
    engines.emplace_back(*cs.table, stage_unit_schedule(c.model, cs.range, tied != nullptr), zo, L.replicas,
                         place.replica);
  for (EngineReplay& e : engines) e.zero_grad();
  std::vector<int> backwards_left(chunks.size(), L.shape.m);
  for (const PipeAction& a : L.tables[size_t(place.pp)]) {
    const int chunk = L.shape.chunk_of(a.stage);
    const ChunkSizes& cs = chunks[size_t(chunk)];
    EngineReplay& e = engines[size_t(chunk)];
    if (a.kind == PipeAction::forward) {
      e.forward(cs.last);
    } else if (a.kind == PipeAction::weight) {
      if (--backwards_left[size_t(chunk)] == 0) e.last_weight();
    } else {
      const bool later = a.kind == PipeAction::input;
      const bool head_in_unit0 = cs.last && tied && cs.first;
      e.backward(cs.last, head_in_unit0, !later && --backwards_left[size_t(chunk)] == 0);
    }
  }
  EngineBytes b;
  for (const EngineReplay& e : engines)
    b.peak += e.peak(), b.gathered += e.gathered_peak(), b.grad_runs.push_back(e.grad_runs());
  return b;
}

// The step's gradient sums after the reductions (train/train_step.cpp), each packing its messages in
// scratch it keeps: under tensor parallelism each chunk's (TpGradients, parallel/tp_grads.h); with a
// tied embedding cut by the pipeline, the step's one for the tied copies (parallel/pipeline_grads.h).
uint64_t gradient_sum_scratch_bytes(const LayoutSizes& L, const RankPlace& place,
                                    const std::vector<ChunkSizes>& chunks, const EngineBytes& engines) {
  const ParallelConfig& pc = L.c.parallel;
  const char* tied = L.ranges.size() > 1 ? L.arch.tied_head(L.c.model) : nullptr;
  uint64_t tp_floats = 0, tied_floats = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::vector<Range>& runs = engines.grad_runs[i];
    if (pc.tp > 1)
      tp_floats += TpGradients::plan(*chunks[i].table, pc.tp, place.tp, pc.tp_sp).scratch_floats(runs);
    if (const ParamInfo* t = tied ? chunks[i].table->try_find(tied) : nullptr)
      for (uint64_t n :
           gradient_sum_messages(runs, {Range{t->offset, t->offset + t->numel}}, HeldRuns::differ))
        tied_floats = std::max(tied_floats, n);
  }
  return (tp_floats + tied_floats) * dtype_size(DType::f32);
}

// The vocabulary-parallel ops' scratch (VocabParallelOps::scratch_floats), one op per rank: the
// embedding's token sums under TP-SP on a stage with the embeddings, the cross-entropy's statistics of
// the head's largest chunk (lm_head_loss: a chunk's rows of every tp rank under TP-SP).
uint64_t vocab_parallel_bytes(const LayoutSizes& L, const std::vector<ChunkSizes>& chunks) {
  if (L.split.t == 1) return 0;
  const int64_t tokens = int64_t(L.B) * L.T;
  uint64_t floats = 0;
  for (const ChunkSizes& cs : chunks) {
    const int64_t sliced = cs.first && L.split.sequence_parallel ? tokens : 0;
    const int64_t loss_rows =
        cs.last ? lm_head_block_rows(lm_head_rows(int(L.split.rows(tokens)), L.c.memory.head_chunk_tokens),
                                     L.split)
                : 0;
    floats = std::max(floats, VocabParallelOps::scratch_floats(sliced, L.c.model.d_model, loss_rows));
  }
  return floats * dtype_size(DType::f32);
}

// The tensor-parallel linears' scratch (TensorParallelLinears::bytes_for): the widest call is the
// attention segment's, which under TP-SP runs over every token of the group (model/query_chunks.h: its
// rows are not chunked); Domino's second slot of partial sums over a half's rows (of the tp group under
// TP-SP).
uint64_t tp_linears_bytes(const LayoutSizes& L) {
  if (L.split.t == 1) return 0;
  const int C = L.c.model.d_model;
  uint64_t bytes = TensorParallelLinears::bytes_for(int64_t(L.B) * L.T, C, L.split);
  if (L.split.overlap) {
    const int64_t half = int64_t(L.c.layer_chunk_rows()) * (L.split.sequence_parallel ? L.split.t : 1);
    bytes += TensorParallelLinears::overlap_bytes_for(half, C, L.split);
  }
  return bytes;
}

RankFootprint footprint_at(const LayoutSizes& L, const RankPlace& place, CheckpointPolicy policy) {
  ODY_CHECK(policy != CheckpointPolicy::automatic,
            "footprint: memory.checkpoint = auto must be resolved to a policy first");
  const RunConfig& c = L.c;
  const ModelConfig& mc = c.model;
  const uint64_t f32 = dtype_size(DType::f32);
  RankFootprint f;
  const ZeroOptions zo = zero_options(c);
  std::vector<ChunkSizes> chunks;
  for (int chunk = 0; chunk < L.shape.v; ++chunk) {
    ChunkSizes cs;
    cs.range = L.range(chunk, place.pp);
    cs.table = &L.table(cs.range, place.tp);
    const StateBytes s = engine_state_bytes(*cs.table, zo, L.replicas, place.replica, kAdamWStates);
    f.state.params += s.params, f.state.grads += s.grads, f.state.optimizer += s.optimizer;
    cs.memory = block_stage_memory(L.arch.block(), mc, cs.range, L.B, L.T, L.memory(policy), L.split,
                                   L.vocab_rows, *L.attention);
    const int64_t tokens = int64_t(L.B) * L.T;
    cs.hidden = uint64_t(L.split.rows(tokens)) * uint64_t(mc.d_model) * f32;
    if (pipeline_schedule(c) == PipelineSchedule::zb1) cs.deferred = cs.memory.deferred;
    cs.first = cs.range.embeddings();
    cs.last = cs.range.head(mc);
    chunks.push_back(std::move(cs));
  }
  const PipelineHoldings held = replay_pipeline(L.tables[size_t(place.pp)], L.shape, chunks);
  // The attention op is one per rank, its scratch the largest any of its stages asks for; the GEMMs'
  // padded-B scratch is sized by the widest linear input (kernels/gemm.h).
  uint64_t attention_scratch = 0;
  for (const ChunkSizes& cs : chunks)
    attention_scratch = std::max<uint64_t>(attention_scratch, cs.memory.attention_scratch);
  f.activations = held.peak + attention_scratch + gemm_scratch_bytes(std::max(mc.d_model, mc.ffn_dim()));
  f.activations += tp_linears_bytes(L) + vocab_parallel_bytes(L, chunks);
  std::vector<StageRange> ranges;
  for (const ChunkSizes& cs : chunks) ranges.push_back(cs.range);
  f.activations += bf16_gemm_scratch(c, ranges).bytes();
  for (size_t i = 0; i < chunks.size(); ++i) f.offload += chunks[i].memory.offload * uint64_t(held.slots[i]);
  // What MPI's reductions hold while they run (MpiCommunicator::transient_bytes): one at a time on each
  // thread that runs them: this one, Domino's, ZeRO's (the footprint assumes MPI_THREAD_MULTIPLE).
  const int world = L.replicas * c.parallel.tp * c.parallel.pp;
  const uint64_t transient = world > 1 ? 3 * uint64_t(MpiCommunicator::max_reduction_bytes()) : 0;
  const int on_node = place.replicas_on_node > 0 ? place.replicas_on_node : L.replicas;
  const bool dp_thread = zero_comm_thread(c.comm.overlap_thread, L.replicas, on_node, true);
  const EngineBytes engines = replay_engines(L, place, chunks);
  f.comm_buffers = engines.peak + transient * (1 + (L.split.overlap ? 1 : 0) + (dp_thread ? 1 : 0)) +
                   gradient_sum_scratch_bytes(L, place, chunks, engines);
  f.gathered_units = engines.gathered;
  return f;
}

}  // namespace

Bf16GemmScratch bf16_gemm_scratch(const RunConfig& c, const std::vector<StageRange>& ranges) {
  if (c.train.precision != Precision::bf16) return {};
  if (bf16_gemm_mode() != Bf16GemmMode::native || c.parallel.tp > 1) return {};  // the emulation's GEMMs
  const bool head =
      std::any_of(ranges.begin(), ranges.end(), [&](const StageRange& r) { return r.head(c.model); });
  const int64_t tokens =
      int64_t(c.train.micro_batch) * c.seq_len() / (c.parallel.sp_ulysses * c.parallel.sp_ring);
  const BlockDims d = architecture(c.model.arch).block().dims(c.model, TpSplit{});
  return Bf16GemmScratch::of(d, tokens, head ? c.model.vocab_size : 0);
}

StateBytes rank_state_bytes(const RunConfig& config, const RankPlace& place) {
  const std::vector<std::pair<int, int>> ranges = stage_ranges(config);
  const int P = config.parallel.pp, v = P > 1 ? config.parallel.pp_virtual : 1;
  const ZeroOptions zo = zero_options(config);
  const std::string model_key = model_config_to_json(config.model).dump();
  StateBytes total;
  for (int chunk = 0; chunk < v; ++chunk) {
    const auto [begin, end] = ranges[size_t(chunk * P + place.pp)];
    const ParamTable& table =
        stage_table(model_key, config.model, StageRange{begin, end}, config.parallel.tp, place.tp);
    const StateBytes s =
        engine_state_bytes(table, zo, replicas_of(config, place), place.replica, kAdamWStates);
    total.params += s.params, total.grads += s.grads, total.optimizer += s.optimizer;
  }
  return total;
}

RankFootprint rank_footprint(const RunConfig& config, const RankPlace& place, CheckpointPolicy policy) {
  const LayoutSizes sizes(config, replicas_of(config, place));
  return footprint_at(sizes, place, policy);
}

RankFootprint max_rank_footprint(const RunConfig& config, int world_size, CheckpointPolicy policy) {
  const ParallelConfig& pc = config.parallel;
  const int others = pc.tp * pc.pp * pc.sp_ulysses * pc.sp_ring;
  ODY_CHECK(others > 0 && world_size % others == 0,
            "a world of {} ranks is not a multiple of tp x pp x sp_ulysses x sp_ring = {}", world_size,
            others);
  const int replicas = (pc.dp > 0 ? pc.dp : world_size / others) * pc.sp_ulysses * pc.sp_ring;
  const LayoutSizes sizes(config, replicas);
  RankFootprint most;
  for (int pp = 0; pp < pc.pp; ++pp)
    for (int tp = 0; tp < pc.tp; ++tp) {
      const RankFootprint f = footprint_at(sizes, RankPlace{pp, tp, 0, replicas}, policy);
      if (f.ram() > most.ram()) most = f;
    }
  return most;
}

std::vector<CheckpointPolicy> auto_checkpoint_candidates(const RunConfig& config) {
  std::vector<CheckpointPolicy> policies = {CheckpointPolicy::none, CheckpointPolicy::cheap,
                                            CheckpointPolicy::keep_attention, CheckpointPolicy::full};
  if (config.memory.tier == MemoryTier::disk) policies.erase(policies.begin(), policies.begin() + 2);
  if (config.parallel.tp_overlap == TpOverlap::domino) policies.resize(2);
  return policies;
}

}  // namespace odyssey
