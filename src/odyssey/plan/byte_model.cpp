#include "odyssey/plan/byte_model.h"

#include <algorithm>

#include <fmt/format.h>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/core/error.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/sdp4bit.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/ulysses.h"
#include "odyssey/parallel/wire_format.h"
#include "odyssey/plan/stage_cache.h"

namespace odyssey {

const char* comm_purpose_name(CommPurpose p) {
  switch (p) {
    case CommPurpose::grads:
      return "grads";
    case CommPurpose::weights:
      return "weights";
    case CommPurpose::zero3_gather:
      return "zero3_gather";
    case CommPurpose::sp:
      return "sp";
    case CommPurpose::tp:
      return "tp";
    case CommPurpose::pp:
      return "pp";
    case CommPurpose::scalars:
      return "scalars";
  }
  return "unknown";
}

namespace {

size_t dtype_bytes(const char* dtype) {
  const std::string d = dtype;
  return d == "u8" ? 1 : d == "bf16" ? 2 : 4;
}

// Bytes of one encoded block of n floats on the wire (values padded to 4 bytes, then the fp32 scales):
// WireBlocks' record, the message size of every compressed collective.
uint64_t wire_record(const WireFormat& f, size_t n) {
  return WireBlocks(f, n, 0).record_bytes();
}

// Appends records in issue order; sizes each as the communicator's accounting does (mpi_communicator.cpp).
struct Emitter {
  const PlanLayout& layout;
  std::vector<CommRecord> out;

  void add(const char* phase, int micro, std::string what, CommKind kind, const PlanGroup& g, uint64_t count,
           const char* dtype, CommPurpose purpose, bool counted = true, uint64_t repeat = 1) {
    if (repeat == 0) return;
    CommRecord r;
    r.repeat = repeat;
    r.phase = phase;
    r.micro = micro;
    r.what = std::move(what);
    r.kind = kind;
    r.group = g.name;
    r.group_size = g.size();
    std::vector<int> nodes;
    for (int q : g.members) nodes.push_back(layout.node_of(q));
    std::sort(nodes.begin(), nodes.end());
    r.group_nodes = int(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
    r.intra = g.intra;
    r.node_ranks = layout.ranks_per_node();
    r.count = count;
    r.dtype = dtype;
    r.purpose = purpose;
    const uint64_t es = dtype_bytes(dtype), P = uint64_t(g.size());
    uint64_t full = count * es;
    if (kind == CommKind::reduce_scatter || kind == CommKind::all_gather || kind == CommKind::all_to_all)
      full = P * count * es;
    // A receive is a call of its own; the sender counts the message.
    r.bus_bytes = counted ? bus_bytes(kind, full, g.size()) : 0;
    out.push_back(std::move(r));
  }
};

// The ZeRO engine of one stage (parallel/zero.cpp, data_parallel.cpp): gradient reductions, ZeRO-3's
// unit gathers, and the parameter gather after the update, over the stage's data-parallel group.
class ZeroModel {
 public:
  ZeroModel(const PlanLayout& layout, int rank, const Stage& stage, Emitter& e)
      : layout_(layout), stage_(stage), e_(e), dp_(layout.group(GridGroup::dp_sp, rank)) {
    const RunConfig& c = layout.config();
    zero_ = c.parallel.zero_stage;
    weight_dtype_ = layout.bf16() ? "bf16" : "f32";  // gradients stay fp32 under the bf16 policy
    comm_.weights = c.comm.weights;
    comm_.grads = c.comm.grads;
    comm_.hpz = c.comm.hpz;
    comm_.grad_pipeline = c.comm.grad_pipeline;
    // dp ranks on my node (trainer.cpp's zero_options).
    int local = 0;
    for (int q : dp_.members) local += layout.node_of(q) == layout.node_of(rank);
    comm_.ranks_per_node = local;
    validate_comm(comm_, zero_, dp_.size());
    const ParamTable& table = stage.table();
    const bool sharded = zero_ > 0;
    const int64_t bucket_bytes = zero_ == 3 ? 0 : int64_t(c.parallel.bucket_mb * 1e6);
    const int P = dp_.size(), r = dp_.rank_of(rank);
    part_ = std::make_unique<Partition>(table, build_buckets(table, bucket_bytes), sharded ? P : 1,
                                        sharded ? r : 0, comm_shard_align(comm_));
    weight_format_ = weight_format(comm_);
    grad_intra_format_ = grad_intra_format(comm_);
    grad_inter_format_ = grad_inter_format(comm_);
    if (comm_.two_level_grads() || comm_.hpz) {
      // split_nodes: nodes are consecutive blocks of D dp ranks; names and levels as it gives them.
      const int D = comm_.ranks_per_node > 0 ? std::min(comm_.ranks_per_node, P) : P, N = P / D;
      std::vector<int> intra, inter;
      for (int j = 0; j < P; ++j) {
        if (j / D == r / D) intra.push_back(dp_.members[size_t(j)]);
        if (j % D == r % D) inter.push_back(dp_.members[size_t(j)]);
      }
      intra_ = layout.subgroup(dp_.name + "_intra", intra, true);
      inter_ = layout.subgroup(dp_.name + "_inter", inter, N == 1);
      two_level_ = comm_.two_level_grads(intra_.size(), inter_.size());
    }
    if (zero_ == 3) {
      schedule_ = stage.unit_schedule();
      forward_uses_.assign(size_t(table.num_units()), {});
      next_forward_.assign(size_t(table.num_units()), 0);
      backward_use_.assign(size_t(table.num_units()), -1);
      held_.assign(size_t(table.num_units()), false);
      for (int i = 0; i < int(schedule_.size()); ++i) {
        const UnitUse& u = schedule_[size_t(i)];
        if (u.forward)
          forward_uses_[size_t(u.unit)].push_back(i);
        else
          backward_use_[size_t(u.unit)] = i;
      }
    }
  }

  const PlanGroup& dp() const { return dp_; }
  const Partition& partition() const { return *part_; }

  void begin_micro_step(int micro, bool last) {
    micro_ = micro;
    reduce_now_ = zero_ >= 2 || last;
  }
  // LayerHooks, in the stage's unit schedule order.
  void before_forward(int unit) {
    if (zero_ < 3) return;
    gather_start(unit, true);
    prefetch_after(forward_use(unit));
  }
  void after_forward(int unit) {
    if (zero_ < 3) return;
    const int position = forward_use(unit);
    int& next = next_forward_[size_t(unit)];
    next = (next + 1) % int(forward_uses_[size_t(unit)].size());
    const bool kept = position + 1 < int(schedule_.size()) && schedule_[size_t(position) + 1].unit == unit;
    if (!kept) held_[size_t(unit)] = false;
  }
  void before_backward(int unit) {
    if (zero_ < 3) return;
    gather_start(unit, false);
    prefetch_after(backward_use_[size_t(unit)]);
  }
  void after_backward(int unit) {
    const int s = part_->segment_of_unit(unit);
    if (reduce_now_ && unit == part_->segments()[size_t(s)].unit_begin) reduce(s);
    if (zero_ == 3) held_[size_t(unit)] = false;
  }
  // The hooks around every use of the schedule (a stage calls them in this order).
  void run_unit_schedule(const std::vector<UnitUse>& uses) {
    for (const UnitUse& u : uses) {
      if (u.forward) {
        before_forward(u.unit);
        after_forward(u.unit);
      } else {
        before_backward(u.unit);
        after_backward(u.unit);
      }
    }
  }
  // After the update: stages 1-2 gather the parameters back (plain, qWD or quantized).
  void after_step() {
    std::fill(held_.begin(), held_.end(), false);
    if (zero_ != 1 && zero_ != 2) return;
    const auto& segs = part_->segments();
    for (size_t s = 0; s < segs.size(); ++s) {
      const uint64_t S = uint64_t(segs[s].layout.shard);
      if (comm_.weights == WeightComm::none)
        e_.add("step", -1, "bucket " + std::to_string(s), CommKind::all_gather, dp_, S, weight_dtype_,
               CommPurpose::weights);
      else {
        e_.add("step", -1, "bucket " + std::to_string(s), CommKind::all_gather, dp_,
               wire_record(weight_format_, S), "u8", CommPurpose::weights);
        e_.out.back().quantized_elements = S * uint64_t(dp_.size() + 1);  // encode mine, decode all
      }
    }
  }

 private:
  int forward_use(int unit) const {
    const std::vector<int>& uses = forward_uses_[size_t(unit)];
    ODY_CHECK(!uses.empty(), "plan: ZeRO-3 unit {} has no forward use in the stage's schedule", unit);
    return uses[size_t(next_forward_[size_t(unit)])];
  }
  void prefetch_after(int position) {
    if (position + 1 < int(schedule_.size())) {
      const UnitUse& next = schedule_[size_t(position) + 1];
      gather_start(next.unit, next.forward);
    }
  }
  void gather_start(int unit, bool forward) {
    if (held_[size_t(unit)]) return;
    held_[size_t(unit)] = true;
    const Partition::Segment& seg = part_->segments()[size_t(part_->segment_of_unit(unit))];
    const bool secondary = comm_.hpz && !forward;
    const PlanGroup& g = secondary ? intra_ : dp_;
    const uint64_t count =
        secondary ? uint64_t(seg.layout.padded) / uint64_t(intra_.size()) : uint64_t(seg.layout.shard);
    const std::string what = "unit " + std::to_string(unit);
    const char* phase = forward ? "fwd" : "bwd";
    if (comm_.weights != WeightComm::none) {
      e_.add(phase, micro_, what, CommKind::all_gather, g, wire_record(weight_format_, count), "u8",
             CommPurpose::zero3_gather);
      e_.out.back().quantized_elements = count * uint64_t(g.size() + 1);
    } else
      e_.add(phase, micro_, what, CommKind::all_gather, g, count, weight_dtype_, CommPurpose::zero3_gather);
  }
  // GradSync::launch: all-reduce (stage 0), reduce-scatter, or the compressed reduce-scatter.
  void reduce(int s) {
    const Partition::Segment& seg = part_->segments()[size_t(s)];
    const std::string what = "bucket " + std::to_string(s);
    const uint64_t S = uint64_t(seg.layout.shard);
    if (zero_ == 0) {
      e_.add("bwd", micro_, what, CommKind::all_reduce, dp_, uint64_t(seg.dense.size()), "f32",
             CommPurpose::grads);
    } else if (comm_.grads == GradComm::none) {
      e_.add("bwd", micro_, what, CommKind::reduce_scatter, dp_, S, "f32", CommPurpose::grads);
    } else if (!two_level_) {
      // one_level_reduce_scatter: one all-to-all of P encoded blocks.
      e_.add("bwd", micro_, what, CommKind::all_to_all, dp_, wire_record(grad_intra_format_, S), "u8",
             CommPurpose::grads);
      e_.out.back().quantized_elements = 2 * S * uint64_t(dp_.size());  // encode P blocks, decode P
    } else {
      two_level(what, S);
    }
  }
  // two_level_reduce_scatter (parallel/sdp4bit.cpp): the shard in pipeline slices on whole groups of both
  // formats; per slice an intra-node all-to-all of N blocks and an inter-node all-to-all of one block,
  // issued as its software pipeline issues them.
  void two_level(const std::string& what, uint64_t S) {
    const size_t N = size_t(inter_.size()), slices = size_t(comm_.grad_pipeline);
    const size_t align = two_level_slice_align(grad_intra_format_, grad_inter_format_);
    const size_t per_slice = (S + slices - 1) / slices;
    const size_t len = std::max(align, (per_slice + align - 1) / align * align);
    std::vector<size_t> n;
    for (size_t begin = 0; begin < S; begin += len) n.push_back(std::min<size_t>(len, S - begin));
    const size_t K = n.size();
    for (size_t k = 0; k < K + 2; ++k) {
      const uint64_t P = uint64_t(dp_.size());
      if (k < K) {
        e_.add("bwd", micro_, what + " slice " + std::to_string(k), CommKind::all_to_all, intra_,
               N * wire_record(grad_intra_format_, n[k]), "u8", CommPurpose::grads);
        e_.out.back().quantized_elements = 2 * P * n[k];  // encode P blocks, decode D x N and re-encode N
      }
      if (k >= 1 && k - 1 < K) {
        e_.add("bwd", micro_, what + " slice " + std::to_string(k - 1), CommKind::all_to_all, inter_,
               wire_record(grad_inter_format_, n[k - 1]), "u8", CommPurpose::grads);
        e_.out.back().quantized_elements = (N + 1) * n[k - 1];  // re-encoded above; decode N partial sums
      }
    }
  }

  const PlanLayout& layout_;
  const Stage& stage_;
  Emitter& e_;
  PlanGroup dp_, intra_, inter_;
  int zero_ = 0, micro_ = 0;
  const char* weight_dtype_ = "f32";
  bool reduce_now_ = false, two_level_ = false;
  CommOptions comm_;
  std::unique_ptr<Partition> part_;
  WireFormat weight_format_, grad_intra_format_, grad_inter_format_;
  std::vector<UnitUse> schedule_;
  std::vector<std::vector<int>> forward_uses_;
  std::vector<int> next_forward_, backward_use_;
  std::vector<bool> held_;
};

// Sequence-parallel attention of one layer (parallel/usp_attention.cpp): Ulysses' all-to-alls, the
// ring's K/V passes, or the hybrid's Ulysses around a ring on the head-sharded tensors.
class SpModel {
 public:
  SpModel(const PlanLayout& layout, int rank, Emitter& e)
      : e_(e),
        ulysses_(layout.group(GridGroup::sp_ulysses, rank)),
        ring_(layout.group(GridGroup::sp_ring, rank)) {
    const RunConfig& c = layout.config();
    const int tp = c.parallel.tp;
    B_ = c.train.micro_batch;
    Tl_ = layout.local_tokens();
    H_ = c.model.n_head / tp;
    Hkv_ = c.model.kv_heads() % tp == 0 ? c.model.kv_heads() / tp : 1;  // trainer.cpp's so.n_kv_head
    D_ = c.model.head_dim();
    active_ = ulysses_.size() * ring_.size() > 1;
    act_ = layout.bf16() ? "bf16" : "f32";
  }
  bool active() const { return active_; }
  bool ulysses() const { return ulysses_.size() > 1; }

  void forward(const char* phase, int micro, int layer) {
    if (!active_) return;
    const std::string what = "layer " + std::to_string(layer);
    if (ulysses()) {
      const UlyssesHeads heads(H_, Hkv_, ulysses_.size());
      const FusedQkv loc{heads.local_heads(), heads.local_kv_heads(), D_};
      e_.add(phase, micro, what + " qkv", CommKind::all_to_all, ulysses_, uint64_t(B_) * Tl_ * loc.width(),
             act_, CommPurpose::sp);
      if (ring_.size() > 1) ring_forward(phase, micro, what, ulysses_.size() * Tl_, heads.local_kv_heads());
      e_.add(phase, micro, what + " out", CommKind::all_to_all, ulysses_,
             uint64_t(B_) * Tl_ * heads.local_heads() * D_, act_, CommPurpose::sp);
    } else {
      ring_forward(phase, micro, what, Tl_, Hkv_);
    }
  }
  void backward(int micro, int layer) {
    if (!active_) return;
    const std::string what = "layer " + std::to_string(layer);
    if (ulysses()) {
      const UlyssesHeads heads(H_, Hkv_, ulysses_.size());
      const FusedQkv loc{heads.local_heads(), heads.local_kv_heads(), D_};
      e_.add("bwd", micro, what + " dout", CommKind::all_to_all, ulysses_,
             uint64_t(B_) * Tl_ * heads.local_heads() * D_, act_, CommPurpose::sp);
      if (ring_.size() > 1) ring_backward(micro, what, ulysses_.size() * Tl_, heads.local_kv_heads());
      e_.add("bwd", micro, what + " dqkv", CommKind::all_to_all, ulysses_, uint64_t(B_) * Tl_ * loc.width(),
             act_, CommPurpose::sp);
    } else {
      ring_backward(micro, what, Tl_, Hkv_);
    }
  }

 private:
  // ring_attention.cpp: P - 1 K/V passes forward (receive posted first, then the send), one record each
  // for the P - 1 identical receives and sends.
  void ring_forward(const char* phase, int micro, const std::string& what, int Tl, int Hkv) {
    const uint64_t kv_n = uint64_t(B_) * Tl * 2 * Hkv * D_;
    pass(phase, micro, what + " kv", kv_n, act_, uint64_t(ring_.size() - 1));
  }
  // Backward: P - 1 K/V passes and P dK/dV passes (the accumulator's full circle).
  void ring_backward(int micro, const std::string& what, int Tl, int Hkv) {
    const uint64_t kv_n = uint64_t(B_) * Tl * 2 * Hkv * D_, P = uint64_t(ring_.size());
    pass("bwd", micro, what + " kv", kv_n, act_, P - 1);
    if (P > 1) pass("bwd", micro, what + " dkv", kv_n, "f32", P);
  }
  void pass(const char* phase, int micro, const std::string& what, uint64_t n, const char* dtype,
            uint64_t times) {
    e_.add(phase, micro, what + " recv", CommKind::send_recv, ring_, n, dtype, CommPurpose::sp, false, times);
    e_.add(phase, micro, what, CommKind::send_recv, ring_, n, dtype, CommPurpose::sp, true, times);
  }

  Emitter& e_;
  PlanGroup ulysses_, ring_;
  int B_ = 1, Tl_ = 1, H_ = 1, Hkv_ = 1, D_ = 1;
  bool active_ = false;
  const char* act_ = "f32";  // the activations' dtype; dK, dV accumulate in fp32
};

// Tensor and pipeline parallelism from planner.md §5.3's closed forms (Megatron vocabulary), for planning
// layouts the exact model does not reproduce yet: per layer per micro-batch, forward 2 all-reduces of the
// b T C activations (TP-SP: 2 all-gathers + 2 reduce-scatters of the same), the backward the same, full
// checkpointing repeating the forward's; the vocabulary-parallel head 3 all-reduces of b T floats; per
// micro-batch one send of the stage's output forward and one of its input gradient backward.
class FormulaModel {
 public:
  FormulaModel(const PlanLayout& layout, int rank, Emitter& e)
      : e_(e), tp_(layout.group(GridGroup::tp, rank)), pp_(layout.group(GridGroup::pp, rank)) {
    const RunConfig& c = layout.config();
    n_ = uint64_t(c.train.micro_batch) * uint64_t(layout.local_tokens());
    C_ = uint64_t(c.model.d_model);
    sp_ = c.parallel.tp_sp;
    stage_ = layout.coords(rank).pp;
    stages_ = c.parallel.pp;
    act_ = layout.bf16() ? "bf16" : "f32";
  }
  void layer(const char* phase, int micro, int layer) {
    if (tp_.size() == 1) return;
    const std::string what = "layer " + std::to_string(layer);
    for (int i = 0; i < 2; ++i) {
      if (sp_) {
        add(phase, micro, what, CommKind::all_gather, tp_, n_ * C_ / tp_.size(), CommPurpose::tp);
        add(phase, micro, what, CommKind::reduce_scatter, tp_, n_ * C_ / tp_.size(), CommPurpose::tp);
      } else {
        add(phase, micro, what, CommKind::all_reduce, tp_, n_ * C_, CommPurpose::tp);
      }
    }
  }
  void head(int micro) {
    if (tp_.size() == 1) return;
    for (int i = 0; i < 3; ++i) add("fwd", micro, "vocab", CommKind::all_reduce, tp_, n_, CommPurpose::tp);
  }
  void stage_output(int micro) {
    if (stage_ + 1 < stages_)
      add("fwd", micro, "activation", CommKind::send_recv, pp_, boundary(), CommPurpose::pp);
  }
  void stage_input_grad(int micro) {
    if (stage_ > 0) add("bwd", micro, "gradient", CommKind::send_recv, pp_, boundary(), CommPurpose::pp);
  }

 private:
  uint64_t boundary() const { return sp_ && tp_.size() > 1 ? n_ * C_ / tp_.size() : n_ * C_; }
  void add(const char* phase, int micro, const std::string& what, CommKind kind, const PlanGroup& g,
           uint64_t count, CommPurpose purpose) {
    e_.add(phase, micro, what, kind, g, count, purpose == CommPurpose::tp && what == "vocab" ? "f32" : act_,
           purpose);
    e_.out.back().formula = true;
  }
  Emitter& e_;
  PlanGroup tp_, pp_;
  uint64_t n_ = 0, C_ = 0;
  bool sp_ = true;
  int stage_ = 0, stages_ = 1;
  const char* act_ = "f32";
};

}  // namespace

// What the model does not cover yet is refused by name, never guessed.
std::string byte_model_gap(const PlanLayout& layout) {
  const RunConfig& c = layout.config();
  if (c.parallel.tp > 1)
    return fmt::format("the byte model does not reproduce parallel.tp > 1 from the engine yet (got {})",
                       c.parallel.tp);
  if (c.parallel.pp > 1)
    return fmt::format("the byte model does not reproduce parallel.pp > 1 from the engine yet (got {})",
                       c.parallel.pp);
  const int U = c.parallel.sp_ulysses, R = c.parallel.sp_ring;
  if (U > 1 && R == 1 && c.memory.chunk_tokens > 0) {
    const int64_t rows = int64_t(c.train.micro_batch) * layout.local_tokens();
    if (rows > c.memory.chunk_tokens)
      return fmt::format(
          "the byte model does not reproduce query-chunked Ulysses yet ({} rows per rank in chunks of "
          "memory.chunk_tokens = {}; set memory.chunk_tokens = 0 or >= {})",
          rows, c.memory.chunk_tokens, rows);
  }
  return "";
}

namespace {

void check_covered(const PlanLayout& layout) {
  const std::string gap = byte_model_gap(layout);
  ODY_CHECK(gap.empty(), "plan: {}", gap);
}

}  // namespace

std::vector<CommRecord> comm_schedule(const PlanLayout& layout, int rank, bool exact) {
  if (exact) check_covered(layout);
  const RunConfig& c = layout.config();
  Emitter e{layout, {}};
  // This rank's stage: the whole model, or its pipeline stage's layers (one stage per pp rank).
  const int pp = c.parallel.pp, stage_index = layout.coords(rank).pp;
  const auto [begin, end] =
      pp == 1 ? std::pair{0, c.model.n_layer}
              : stage_layers(c.model.n_layer, pp, c.parallel.pp_layers)[size_t(stage_index)];
  const auto stage =
      &planned_stage(c.model, StageRange{begin, end}, TpPiece{c.parallel.tp, layout.coords(rank).tp});
  ZeroModel zero(layout, rank, *stage, e);
  SpModel sp(layout, rank, e);
  FormulaModel formula(layout, rank, e);
  // Full checkpointing reruns a layer's attention forward in its backward (model/recompute.h), all but
  // the stage's last layer, whose activations are still the working ones (layer_loop.h, "fresh").
  const bool full = c.memory.checkpoint == CheckpointPolicy::full;
  const std::vector<UnitUse>& uses = stage->unit_schedule();
  const int m = layout.micro_steps();
  // The stage's units: 0 the embeddings (first stage only), then its layers, then the final norm (and
  // head) on the last stage.
  const int first_layer_unit = begin == 0 ? 1 : 0;
  auto layer_of = [&](int unit) {
    const int l = unit - first_layer_unit;
    return l >= 0 && l < end - begin ? begin + l : -1;
  };
  const bool head = end == c.model.n_layer;
  for (int micro = 0; micro < m; ++micro) {
    zero.begin_micro_step(micro, micro == m - 1);
    bool backward_started = false;
    for (const UnitUse& u : uses) {
      const int layer = layer_of(u.unit);
      if (u.forward) {
        zero.before_forward(u.unit);
        if (layer >= 0) sp.forward("fwd", micro, layer), formula.layer("fwd", micro, layer);
        zero.after_forward(u.unit);
      } else {
        if (!backward_started) {
          backward_started = true;
          formula.stage_output(micro);
          if (head) formula.head(micro);
        }
        zero.before_backward(u.unit);
        if (layer >= 0 && full && layer != end - 1)
          sp.forward("bwd", micro, layer), formula.layer("bwd", micro, layer);
        if (layer >= 0) sp.backward(micro, layer), formula.layer("bwd", micro, layer);
        zero.after_backward(u.unit);
      }
    }
    formula.stage_input_grad(micro);
  }
  // train_step: the loss (sum, count) over the replicas (and the pipeline's stages), then the gradient
  // norm's partial sums (reductions.cpp: an all-gather of doubles, summed in rank order), then the update.
  e.add("scalars", -1, "loss", CommKind::all_gather, zero.dp(), 2 * sizeof(double), "u8",
        CommPurpose::scalars);
  if (pp > 1) {
    e.add("scalars", -1, "loss", CommKind::all_gather, layout.group(GridGroup::pp, rank), 2 * sizeof(double),
          "u8", CommPurpose::scalars);
    e.out.back().formula = true;
  }
  if (c.parallel.zero_stage > 0)
    e.add("scalars", -1, "grad norm", CommKind::all_gather, zero.dp(), sizeof(double), "u8",
          CommPurpose::scalars);
  zero.after_step();
  return e.out;
}

CommTotals comm_totals(const std::vector<CommRecord>& records) {
  CommTotals t;
  for (const CommRecord& r : records) {
    CommTotalsValue& v = t[{r.group, r.kind, r.intra}];
    v.calls += r.repeat;
    v.bytes += r.bus_bytes * r.repeat;
  }
  return t;
}

nlohmann::json comm_totals_json(const CommTotals& totals) {
  uint64_t total = 0, intra = 0, inter = 0;
  nlohmann::json by_kind = nlohmann::json::object(), by_group = nlohmann::json::object();
  for (const auto& [key, v] : totals) {
    total += v.bytes;
    (key.intra ? intra : inter) += v.bytes;
    nlohmann::json& k = by_kind[comm_kind_name(key.kind)];
    if (k.is_null()) k = {{"calls", 0}, {"bytes", 0}, {"intra_node_bytes", 0}, {"inter_node_bytes", 0}};
    k["calls"] = k["calls"].get<uint64_t>() + v.calls;
    k["bytes"] = k["bytes"].get<uint64_t>() + v.bytes;
    const char* level = key.intra ? "intra_node_bytes" : "inter_node_bytes";
    k[level] = k[level].get<uint64_t>() + v.bytes;
    nlohmann::json& g = by_group[key.group.empty() ? "unnamed" : key.group];
    if (g.is_null()) g = {{"calls", 0}, {"bytes", 0}};
    g["calls"] = g["calls"].get<uint64_t>() + v.calls;
    g["bytes"] = g["bytes"].get<uint64_t>() + v.bytes;
  }
  return {{"total_bytes", total},
          {"intra_node_bytes", intra},
          {"inter_node_bytes", inter},
          {"by_kind", by_kind},
          {"by_group", by_group}};
}

nlohmann::json comm_record_json(const CommRecord& r) {
  return {{"phase", r.phase},
          {"micro", r.micro},
          {"what", r.what},
          {"kind", comm_kind_name(r.kind)},
          {"group", r.group},
          {"level", r.intra ? "intra" : "inter"},
          {"count", r.count},
          {"repeat", r.repeat},
          {"dtype", r.dtype},
          {"bus_bytes", r.bus_bytes},
          {"purpose", comm_purpose_name(r.purpose)}};
}

}  // namespace odyssey
