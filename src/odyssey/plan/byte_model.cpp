#include "odyssey/plan/byte_model.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include <fmt/format.h>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/core/error.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/model/lm_head.h"
#include "odyssey/model/row_chunks.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/data_parallel.h"
#include "odyssey/parallel/pipeline_grads.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/sdp4bit.h"
#include "odyssey/parallel/shard.h"
#include "odyssey/parallel/tp_grads.h"
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
    r.group_nodes = g.nodes;
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
    part_ =
        &planned_partition(table, bucket_bytes, sharded ? P : 1, sharded ? r : 0, comm_shard_align(comm_));
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
  // ZeroEngine::reduced_grad_runs: the dense elements whose reduced gradients this rank holds (stage 0
  // every segment, else its shard's valid part).
  std::vector<Range> grad_runs() const { return reduced_grad_ranges(*part_, zero_); }

  // A forward of micro-batch `micro` (its ZeRO-3 gathers).
  void begin_forward(int micro) { micro_ = micro; }
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
  const Partition* part_ = nullptr;
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

// Tensor parallelism of one stage (parallel/tp_linear.cpp, vocab_parallel.cpp, model/block_runner.cpp,
// lm_head.cpp): every linear pair's collectives per row chunk of the residual stream, the vocabulary-
// parallel embedding and the LM head's cross-entropy. Plain TP all-reduces the row linears' outputs
// (forward) and the column linears' input gradients (backward); TP-SP gathers each column linear's
// input (again in backward) and each row linear's output gradient, and reduce-scatters what plain TP
// all-reduces. Every call moves n C floats per rank for a chunk of n residual rows.
class TpModel {
 public:
  TpModel(const PlanLayout& layout, int rank, Emitter& e) : e_(e), tp_(layout.group(GridGroup::tp, rank)) {
    const RunConfig& c = layout.config();
    const int t = tp_.size();
    sp_ = c.parallel.tp_sp && t > 1;
    C_ = uint64_t(c.model.d_model);
    tokens_ = int64_t(c.train.micro_batch) * layout.local_tokens();
    rows_ = sp_ ? tokens_ / t : tokens_;
    // The layer's row chunks (model/query_chunks.h): memory.chunk_tokens, or Domino's two halves;
    // query-chunked layers (the local attention or Ulysses alone, not under TP-SP) chunk per sequence.
    const int chunk = c.layer_chunk_rows(), T = layout.local_tokens();
    const bool overlap = t > 1 && c.parallel.tp_overlap == TpOverlap::domino;
    const bool chunks_queries = c.parallel.sp_ring == 1;
    const bool on = chunks_queries && !sp_ && RowChunks{int(rows_), chunk}.count() > 1 &&
                    (!overlap || RowChunks{int(rows_), chunk, T}.count() == 2);
    rc_ = RowChunks{int(rows_), chunk, on ? T : 0};
    head_chunk_ = lm_head_rows(int(rows_), c.memory.head_chunk_tokens);
  }
  bool active() const { return tp_.size() > 1; }
  const PlanGroup& group() const { return tp_; }
  int chunks() const { return rc_.count(); }
  // The stage's hidden states a pipeline sends: its residual rows.
  uint64_t hidden() const { return uint64_t(rows_) * C_; }

  // The qkv column linears, chunk by chunk (TP-SP gathers their input).
  void qkv_forward(const char* phase, int micro, int layer) {
    if (!sp_) return;
    for (int j = 0; j < rc_.count(); ++j) add(phase, micro, layer, CommKind::all_gather, j);
  }
  // Per chunk: the attention projection (row), the MLP's up (column) and down (row).
  void mlp_forward(int micro, int layer) {
    for (int j = 0; j < rc_.count(); ++j) {
      reduce("fwd", micro, layer, j);
      if (sp_) add("fwd", micro, layer, CommKind::all_gather, j);
      reduce("fwd", micro, layer, j);
    }
  }
  // Per chunk: the recompute token_local asks for (up to the activation: the projection's reduction and
  // the up linear's gather), then down's, up's and the projection's backwards.
  void mlp_backward(int micro, int layer, bool token_local) {
    if (!active()) return;
    for (int j = 0; j < rc_.count(); ++j) {
      if (token_local) {
        reduce("bwd", micro, layer, j);
        if (sp_) add("bwd", micro, layer, CommKind::all_gather, j);
      }
      if (sp_) add("bwd", micro, layer, CommKind::all_gather, j);  // down: d(output) gathered
      if (sp_) add("bwd", micro, layer, CommKind::all_gather, j);  // up: its input gathered again
      reduce("bwd", micro, layer, j);                              // up: d(input)
      if (sp_) add("bwd", micro, layer, CommKind::all_gather, j);  // projection: d(output) gathered
    }
  }
  // Per chunk: the qkv linear's backward (its input gathered again under TP-SP, d(input) reduced).
  void qkv_backward(int micro, int layer) {
    if (!active()) return;
    for (int j = 0; j < rc_.count(); ++j) {
      if (sp_) add("bwd", micro, layer, CommKind::all_gather, j);
      reduce("bwd", micro, layer, j);
    }
  }
  // The vocabulary-parallel embedding over the micro-batch's tokens: its partial sums reduced
  // (TP-SP: scattered to the token slices); backward, TP-SP gathers d(output).
  void embedding_forward(int micro) {
    if (!active()) return;
    if (sp_)
      e_.add("fwd", micro, "embedding", CommKind::reduce_scatter, tp_, uint64_t(rows_) * C_, "f32",
             CommPurpose::tp);
    else
      e_.add("fwd", micro, "embedding", CommKind::all_reduce, tp_, uint64_t(tokens_) * C_, "f32",
             CommPurpose::tp);
  }
  void embedding_backward(int micro) {
    if (sp_)
      e_.add("bwd", micro, "embedding", CommKind::all_gather, tp_, uint64_t(rows_) * C_, "f32",
             CommPurpose::tp);
  }
  // The LM head in the loss, per chunk of m residual rows (n = m G tokens): the column linear, the
  // cross-entropy's max and (normaliser, target logit) all-reduces, the column backward.
  void head(int micro) {
    if (!active()) return;
    const int64_t G = tokens_ / rows_;
    for (int64_t r0 = 0; r0 < rows_; r0 += head_chunk_) {
      const uint64_t m = uint64_t(std::min<int64_t>(head_chunk_, rows_ - r0)), n = m * uint64_t(G);
      if (sp_) e_.add("fwd", micro, "lm_head", CommKind::all_gather, tp_, m * C_, "f32", CommPurpose::tp);
      e_.add("fwd", micro, "cross_entropy max", CommKind::all_reduce, tp_, n, "f32", CommPurpose::tp);
      e_.add("fwd", micro, "cross_entropy sums", CommKind::all_reduce, tp_, 2 * n, "f32", CommPurpose::tp);
      if (sp_) {
        e_.add("fwd", micro, "lm_head", CommKind::all_gather, tp_, m * C_, "f32", CommPurpose::tp);
        e_.add("fwd", micro, "lm_head", CommKind::reduce_scatter, tp_, m * C_, "f32", CommPurpose::tp);
      } else {
        e_.add("fwd", micro, "lm_head", CommKind::all_reduce, tp_, n * C_, "f32", CommPurpose::tp);
      }
    }
  }

 private:
  // A row linear's output (forward) or a column linear's d(input) (backward) over chunk j.
  void reduce(const char* phase, int micro, int layer, int j) {
    add(phase, micro, layer, sp_ ? CommKind::reduce_scatter : CommKind::all_reduce, j);
  }
  void add(const char* phase, int micro, int layer, CommKind kind, int j) {
    if (!active()) return;
    e_.add(phase, micro, "layer " + std::to_string(layer), kind, tp_, uint64_t(rc_.size(j)) * C_, "f32",
           CommPurpose::tp);
  }

  Emitter& e_;
  PlanGroup tp_;
  bool sp_ = false;
  uint64_t C_ = 0;
  int64_t tokens_ = 0, rows_ = 0;  // the micro-batch's tokens on this rank; its residual rows
  RowChunks rc_{0, 0};
  int head_chunk_ = 0;
};

}  // namespace

// What the model does not cover yet is refused by name, never guessed.
std::string byte_model_gap(const PlanLayout& layout) {
  const RunConfig& c = layout.config();
  const int U = c.parallel.sp_ulysses, R = c.parallel.sp_ring;
  const int chunk = c.layer_chunk_rows();
  if (U > 1 && R == 1 && chunk > 0) {
    const int64_t rows = int64_t(c.train.micro_batch) * layout.local_tokens();
    if (rows > chunk)
      return fmt::format(
          "the byte model does not reproduce query-chunked Ulysses yet ({} rows per rank in chunks of "
          "memory.chunk_tokens = {}; set memory.chunk_tokens = 0 or >= {})",
          rows, chunk, rows);
  }
  return "";
}

namespace {

void check_covered(const PlanLayout& layout) {
  const std::string gap = byte_model_gap(layout);
  ODY_CHECK(gap.empty(), "plan: {}", gap);
}

// The model's tied tensor (the LM head's copy of an embeddings-unit tensor) a pipeline's last stage
// holds, as the layout builder finds it; empty when untied or one stage holds both ends.
std::string tied_tensor(const ModelConfig& model, const std::vector<std::pair<int, int>>& ranges) {
  if (ranges.size() < 2) return "";
  const ParamTable& whole = planned_stage(model, StageRange{0, model.n_layer}, TpPiece{}).table();
  const auto [lb, le] = ranges.back();
  const ParamTable& last = planned_stage(model, StageRange{lb, le}, TpPiece{}).table();
  // Per pair of planned tables (stable for the process): a search asks for it once per layout.
  static std::map<std::pair<const ParamTable*, const ParamTable*>, std::string> found;
  auto it = found.find({&whole, &last});
  if (it != found.end()) return it->second;
  std::string name;
  for (const ParamInfo& t : last.tensors())
    if (const ParamInfo* w = whole.try_find(t.name); w && w->unit == 0) name = t.name;
  return found.emplace(std::pair{&whole, &last}, name).first->second;
}

// One chunk (pipeline stage) of this rank: its stage, its ZeRO engine and its place in the model.
struct ChunkModel {
  const Stage* stage = nullptr;
  std::unique_ptr<ZeroModel> zero;
  int begin = 0, end = 0;
  bool head = false, embeddings = false;
  std::vector<UnitUse> forward_uses, backward_uses;  // in schedule order
  int layer_of(int unit) const {
    const int l = unit - (embeddings ? 1 : 0);
    return l >= 0 && l < end - begin ? begin + l : -1;
  }
};

// Drives the stages of one rank through the step's pipeline actions (parallel/pipeline.cpp) with the
// hooks in the order the stages call them (model/layer_stage.h), emitting every collective on the way.
class StepModel {
 public:
  StepModel(const PlanLayout& layout, int rank, Emitter& e)
      : layout_(layout),
        c_(layout.config()),
        e_(e),
        sp_(layout, rank, e),
        tp_(layout, rank, e),
        pp_(layout.group(GridGroup::pp, rank)) {
    const GridCoords me = layout.coords(rank);
    P_ = c_.parallel.pp;
    shape_ = PipelineShape{P_, P_ > 1 ? c_.parallel.pp_virtual : 1, layout.micro_steps()};
    ranges_ = P_ == 1 ? std::vector<std::pair<int, int>>{{0, c_.model.n_layer}}
                      : stage_layers(c_.model.n_layer, shape_.stages(), c_.parallel.pp_layers);
    for (int chunk = 0; chunk < shape_.v; ++chunk) {
      ChunkModel& ch = chunks_.emplace_back();
      std::tie(ch.begin, ch.end) = ranges_[size_t(chunk * P_ + me.pp)];
      ch.stage = &planned_stage(c_.model, StageRange{ch.begin, ch.end}, TpPiece{c_.parallel.tp, me.tp});
      ch.zero = std::make_unique<ZeroModel>(layout, rank, *ch.stage, e);
      ch.head = ch.end == c_.model.n_layer;
      ch.embeddings = ch.begin == 0;
      for (const UnitUse& u : ch.stage->unit_schedule())
        (u.forward ? ch.forward_uses : ch.backward_uses).push_back(u);
    }
    // memory.checkpoint = auto: the engine's memory check takes the first policy that fits the host
    // (train/memory_plan.cpp); planned as that first one, the layout fitting.
    policy_ = c_.memory.checkpoint;
    if (policy_ == CheckpointPolicy::automatic)
      policy_ =
          c_.memory.tier == MemoryTier::disk ? CheckpointPolicy::keep_attention : CheckpointPolicy::none;
    actions_ = build_schedule(P_ > 1 ? c_.parallel.pp_schedule : PipelineSchedule::one_f_one_b,
                              shape_)[size_t(me.pp)];
  }

  void run() {
    std::vector<int> backwards_left(chunks_.size(), shape_.m);
    for (const PipeAction& a : actions_) {
      const int chunk = shape_.chunk_of(a.stage);
      if (a.kind == PipeAction::forward)
        forward(chunk, a.stage, a.mb);
      else if (a.kind == PipeAction::weight)
        weight(chunk, a.mb, --backwards_left[size_t(chunk)] == 0);
      else
        backward(chunk, a.stage, a.mb,
                 a.kind == PipeAction::backward && --backwards_left[size_t(chunk)] == 0);
    }
  }
  const std::vector<std::pair<int, int>>& ranges() const { return ranges_; }
  std::vector<ChunkModel>& chunks() { return chunks_; }
  const PlanGroup& pp() const { return pp_; }
  const PlanGroup& tp() const { return tp_.group(); }

 private:
  void forward(int chunk, int stage, int mb) {
    ChunkModel& ch = chunks_[size_t(chunk)];
    ZeroModel& zero = *ch.zero;
    if (stage > 0) p2p("fwd", mb, "activation recv", false);
    zero.begin_forward(mb);
    bool embedded = false;
    for (const UnitUse& u : ch.forward_uses) {
      zero.before_forward(u.unit);
      const int layer = ch.layer_of(u.unit);
      if (layer >= 0) {
        tp_.qkv_forward("fwd", mb, layer);
        sp_.forward("fwd", mb, layer);
        tp_.mlp_forward(mb, layer);
      } else if (u.unit == 0 && ch.embeddings && !embedded) {
        embedded = true;
        tp_.embedding_forward(mb);
      }
      zero.after_forward(u.unit);
    }
    if (ch.head) {  // the loss: the head's backward use begins, its chunks run forward and backward
      zero.before_backward(ch.backward_uses.front().unit);
      tp_.head(mb);
    }
    if (stage + 1 < shape_.stages()) p2p("fwd", mb, "activation", true);
  }

  void backward(int chunk, int stage, int mb, bool last) {
    ChunkModel& ch = chunks_[size_t(chunk)];
    ZeroModel& zero = *ch.zero;
    if (stage + 1 < shape_.stages()) p2p("bwd", mb, "gradient recv", false);
    zero.begin_micro_step(mb, last);
    // A tied head's use (unit 0, begun in the loss) ends after the embeddings' backward; an untied
    // head's (the final unit) at once.
    const int head_unit = ch.head ? ch.backward_uses.front().unit : -1;
    if (ch.head && head_unit != 0) zero.after_backward(head_unit);
    const bool recomputes = keeps_layer_inputs(policy_);
    for (size_t i = ch.head ? 1 : 0; i < ch.backward_uses.size(); ++i) {
      const int unit = ch.backward_uses[i].unit, layer = ch.layer_of(unit);
      zero.before_backward(unit);
      if (layer >= 0) {
        // model/layer_loop.h: the stage's last layer is still fresh from the forward.
        const bool fresh = layer == ch.end - 1;
        if (recomputes && !fresh) tp_.qkv_forward("bwd", mb, layer);
        if (recomputes && !fresh && policy_ != CheckpointPolicy::keep_attention)
          sp_.forward("bwd", mb, layer);
        tp_.mlp_backward(mb, layer, recomputes && (!fresh || tp_.chunks() > 1));
        sp_.backward(mb, layer);
        tp_.qkv_backward(mb, layer);
      } else if (unit == 0 && ch.embeddings) {
        tp_.embedding_backward(mb);
      }
      zero.after_backward(unit);
    }
    if (ch.head && head_unit == 0) {
      tp_.embedding_backward(mb);
      zero.after_backward(0);
    }
    if (stage > 0) p2p("bwd", mb, "gradient", true);
  }

  // zb1's W: the chunk's last one ends its engine's last micro-step (every backward use's reduction).
  void weight(int chunk, int mb, bool last) {
    if (!last) return;
    ChunkModel& ch = chunks_[size_t(chunk)];
    ch.zero->begin_micro_step(mb, true);
    for (const UnitUse& u : ch.backward_uses) ch.zero->after_backward(u.unit);
  }

  // A send of the stage's hidden states (or their gradient) counts the message; its receive a call.
  void p2p(const char* phase, int mb, const char* what, bool send) {
    e_.add(phase, mb, what, CommKind::send_recv, pp_, tp_.hidden(), "f32", CommPurpose::pp, send);
  }

  const PlanLayout& layout_;
  const RunConfig& c_;
  Emitter& e_;
  SpModel sp_;
  TpModel tp_;
  PlanGroup pp_;
  int P_ = 1;
  PipelineShape shape_;
  std::vector<std::pair<int, int>> ranges_;
  std::vector<ChunkModel> chunks_;
  CheckpointPolicy policy_ = CheckpointPolicy::none;
  std::vector<PipeAction> actions_;
};

// Members of the group the layout builder splits with color(q) from the world (key: world rank): the
// ranks with this rank's color; intra as the builder declares it (one node in the world).
PlanGroup split_group(const PlanLayout& layout, const std::string& name, int rank,
                      const std::function<int(int)>& color) {
  std::vector<int> members;
  for (int q = 0; q < layout.world(); ++q)
    if (color(q) == color(rank)) members.push_back(q);
  return layout.subgroup(name, members, layout.nodes() == 1);
}

}  // namespace

std::vector<CommRecord> comm_schedule(const PlanLayout& layout, int rank, bool exact) {
  if (exact) check_covered(layout);
  const RunConfig& c = layout.config();
  Emitter e{layout, {}};
  // About the records of a step (the layers' per micro-batch), so the list grows without copies.
  e.out.reserve(size_t(layout.micro_steps()) * size_t(c.model.n_layer / c.parallel.pp + 4) * 16);
  StepModel step(layout, rank, e);
  step.run();
  auto& chunks = step.chunks();
  const GridDims& d = layout.dims();
  const int t = d.tp, P = d.pp;
  // train_step: the tied copies summed over the embedding group (pipeline_grads.h), per chunk holding one.
  const std::string tied = tied_tensor(c.model, step.ranges());
  if (!tied.empty()) {
    const int zero = c.parallel.zero_stage;
    auto color = [&](int q) {
      const GridCoords g = layout.coords(q);
      if (g.pp != 0 && g.pp != P - 1) return -1;
      const int replica = g.sp_ulysses + d.sp_ulysses * (g.sp_ring + d.sp_ring * g.dp);
      return (zero == 0 ? replica : 0) * t + g.tp;
    };
    const PlanGroup embd = split_group(layout, "embd", rank, color);
    for (ChunkModel& ch : chunks)
      if (const ParamInfo* p = ch.stage->table().try_find(tied))
        for (uint64_t n : gradient_sum_messages(ch.zero->grad_runs(),
                                                {Range{p->offset, p->offset + p->numel}}, HeldRuns::differ))
          e.add("step", -1, "tied " + tied, CommKind::all_reduce, embd, n, "f32", CommPurpose::grads);
  }
  // Tensor parallelism's sums (tp_grads.h): replicated tensors over tp under TP-SP, replicated kv heads
  // over their kv group.
  if (t > 1) {
    const int K = c.model.kv_heads();
    const PlanGroup kv = split_group(layout, "tp_kv", rank, [&](int q) {
      const GridCoords g = layout.coords(q);
      const int first = q - g.tp;  // the tp group's first member (tp is innermost)
      return kv_group_color(K, t, g.tp, first);
    });
    for (ChunkModel& ch : chunks) {
      const TpGradients g = TpGradients::plan(ch.stage->table(), t, layout.coords(rank).tp, c.parallel.tp_sp);
      if (!g.over_tp.empty())
        for (uint64_t n : gradient_sum_messages(ch.zero->grad_runs(), g.over_tp, HeldRuns::same))
          e.add("step", -1, "replicated", CommKind::all_reduce, step.tp(), n, "f32", CommPurpose::tp);
      if (!g.over_kv.empty())
        for (uint64_t n : gradient_sum_messages(ch.zero->grad_runs(), g.over_kv, HeldRuns::same))
          e.add("step", -1, "kv heads", CommKind::all_reduce, kv, n, "f32", CommPurpose::tp);
    }
  }
  // The loss (sum, count) over the replicas and the pipeline's stages, then the gradient norm's partial
  // sums (reductions.cpp: an all-gather of doubles, summed in rank order) per engine over its replicas,
  // then over the stages and the tensor-parallel pieces; then the update.
  const PlanGroup& dp = chunks.front().zero->dp();
  e.add("scalars", -1, "loss", CommKind::all_gather, dp, 2 * sizeof(double), "u8", CommPurpose::scalars);
  if (P > 1)
    e.add("scalars", -1, "loss", CommKind::all_gather, step.pp(), 2 * sizeof(double), "u8",
          CommPurpose::scalars);
  if (c.parallel.zero_stage > 0)
    for (size_t k = 0; k < (P > 1 || t > 1 ? chunks.size() : 1); ++k)
      e.add("scalars", -1, "grad norm", CommKind::all_gather, dp, sizeof(double), "u8", CommPurpose::scalars);
  if (P > 1)
    e.add("scalars", -1, "grad norm", CommKind::all_gather, step.pp(), sizeof(double), "u8",
          CommPurpose::scalars);
  if (t > 1)
    e.add("scalars", -1, "grad norm", CommKind::all_gather, step.tp(), sizeof(double), "u8",
          CommPurpose::scalars);
  for (ChunkModel& ch : chunks) ch.zero->after_step();
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
