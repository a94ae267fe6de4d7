#include "odyssey/parallel/zero.h"

#include <algorithm>
#include <cmath>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/p2p_tags.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/bf16_round.h"
#include "odyssey/optim/grad_clip.h"
#include "odyssey/parallel/sdp4bit.h"

namespace odyssey {

nlohmann::json MemoryReport::to_json() const {
  return {{"params", params},
          {"grads", grads},
          {"optimizer", optimizer},
          {"activations", activations},
          {"comm_buffers", comm_buffers},
          {"total", total()}};
}

double ExposedComm::hidden_fraction() const {
  if (comm_seconds <= 0) return 1.0;
  return std::clamp(1.0 - exposed_seconds / comm_seconds, 0.0, 1.0);
}

ExposedComm& ExposedComm::operator+=(const ExposedComm& o) {
  exposed_seconds += o.exposed_seconds;
  comm_seconds += o.comm_seconds;
  threaded |= o.threaded;
  return *this;
}

nlohmann::json CommTraffic::per_param_json(int64_t params) const {
  const double n = params > 0 ? double(params) : 1.0;
  return {{"weights_intra", weights_intra / n},
          {"weights_inter", weights_inter / n},
          {"grads_intra", grads_intra / n},
          {"grads_inter", grads_inter / n}};
}

ZeroCommSizes::ZeroCommSizes(const ZeroOptions& options, int dp)
    : opt_(options),
      dp_(dp),
      D_(options.comm.node_ranks(dp)),
      two_level_(options.comm.two_level_grads(D_, dp / D_)),
      weights_(weight_format(options.comm)),
      grads_intra_(grad_intra_format(options.comm)),
      grads_inter_(grad_inter_format(options.comm)) {}

uint64_t ZeroCommSizes::unit_gather_bytes(int64_t shard, int64_t padded, bool forward) const {
  const bool secondary = opt_.comm.hpz && !forward;
  const size_t S = size_t(secondary ? secondary_floats(padded) : shard), P = size_t(secondary ? D_ : dp_);
  if (opt_.comm.weights != WeightComm::none) return quantized_gather_bytes(weights_, S, P);
  if (opt_.bf16) return (S + S * P) * sizeof(bf16);
  return 0;
}

uint64_t ZeroCommSizes::reduction_bytes(int64_t shard) const {
  if (opt_.comm.grads == GradComm::none) return 0;
  if (two_level_)
    return two_level_reduce_scatter_bytes(grads_intra_, grads_inter_, size_t(shard), size_t(D_),
                                          size_t(dp_ / D_), size_t(opt_.comm.grad_pipeline));
  return one_level_reduce_scatter_bytes(grads_intra_, size_t(shard), size_t(dp_));
}

uint64_t ZeroCommSizes::weight_gather_bytes(const Partition& part) const {
  if (opt_.stage != 1 && opt_.stage != 2) return 0;
  if (opt_.bf16) return uint64_t(part.local_total() + part.padded_total()) * sizeof(bf16);
  if (opt_.comm.weights == WeightComm::none) return 0;
  uint64_t most = 0;
  for (const Partition::Segment& seg : part.segments())
    most = std::max<uint64_t>(most, quantized_gather_bytes(weights_, size_t(seg.layout.shard), size_t(dp_)));
  return most;
}

uint64_t ZeroCommSizes::collective_peak(const Partition& part) const {
  uint64_t most = weight_gather_bytes(part);
  for (const Partition::Segment& seg : part.segments())
    most = std::max(most, reduction_bytes(seg.layout.shard));
  return most;
}

ZeroEngine::ZeroEngine(Stage& model, Communicator& dp, const ZeroOptions& options, const Optimizer& optimizer)
    : model_(model), dp_(dp), opt_(options), sizes_(options, dp.size()), optimizer_(optimizer) {
  ODY_CHECK(opt_.stage >= 0 && opt_.stage <= 3, "parallel.zero_stage must be 0, 1, 2 or 3, got {}",
            opt_.stage);
  ODY_CHECK(!model.owns_storage(), "ZeRO: the model must be built without storage (allocate_storage=false)");
  const ParamTable& table = model.table();
  const int64_t bucket_bytes = opt_.stage == 3 ? 0 : int64_t(opt_.bucket_mb * 1e6);
  // Stage 0 shards nothing: a one-rank partition makes "local" the whole (unpadded) buffer.
  const bool sharded = opt_.stage > 0;
  const CommOptions& comm = opt_.comm;
  validate_comm(comm, opt_.stage, dp.size());
  part_ = std::make_unique<Partition>(table, build_buckets(table, bucket_bytes), sharded ? dp.size() : 1,
                                      sharded ? dp.rank() : 0, comm_shard_align(comm));
  weight_format_ = weight_format(comm);
  grad_intra_format_ = grad_intra_format(comm);
  grad_inter_format_ = grad_inter_format(comm);
  if (comm.two_level_grads() || comm.hpz) {
    // Nodes are consecutive blocks of D dp ranks (rank = node·D + local index).
    NodeSplit nodes = split_nodes(dp, comm.node_ranks(dp.size()));
    intra_ = std::move(nodes.intra);
    inter_ = std::move(nodes.inter);
    two_level_grads_ = comm.two_level_grads(intra_->size(), inter_->size());
  }
  if (opt_.comm_thread && dp.size() > 1) {
    // Collective over dp (and the node groups): every rank of the group builds its engine alike.
    auto duplicate = [](Communicator& c) { return c.split(0, c.rank(), c.name(), c.intra_node()); };
    dp_own_ = duplicate(dp);
    if (intra_) intra_own_ = duplicate(*intra_), inter_own_ = duplicate(*inter_);
    thread_ = std::make_unique<CommThread>();
    dp_async_ = std::make_unique<ThreadedCommunicator>(*thread_, *dp_own_);
    if (intra_own_) intra_async_ = std::make_unique<ThreadedCommunicator>(*thread_, *intra_own_);
  }
  ODY_CHECK(!opt_.bf16 || !comm.quantized(),
            "train.precision = bf16 does not run with compressed communication (comm.weights, comm.grads, "
            "comm.hpz) yet");
  if ((opt_.stage == 1 || opt_.stage == 2) && comm.weights != WeightComm::none)
    master_.resize(size_t(part_->local_total()));
  if (opt_.stage <= 2 && opt_.bf16) master_.resize(size_t(part_->local_total()));
  if (comm.hpz) secondary_.resize(size_t(table.num_units()));
  params_.resize(size_t(opt_.stage == 3 ? part_->local_total() : part_->padded_total()));
  state_.resize(optimizer.state_names().size());
  for (FloatBuffer& st : state_) st.resize(size_t(part_->local_total()));
  if (opt_.stage == 3) {
    gathered_.resize(size_t(table.num_units()));
    schedule_ = model.unit_schedule();
    uses_ = index_unit_uses(schedule_, table.num_units());
    next_forward_.assign(size_t(table.num_units()), 0);
  }

  GradSync::Options g;
  g.reduce_scatter = sharded;
  g.every_micro_step = opt_.stage >= 2;
  g.pooled = opt_.stage >= 2;
  g.overlap = opt_.overlap;
  g.max_in_flight = opt_.max_in_flight;
  if (comm.grads != GradComm::none)
    g.reduce_scatter_fn = [this](const float* send, float* recv, size_t S, int segment) {
      return reduce_scatter_compressed(send, recv, S, segment);
    };
  grads_ = std::make_unique<GradSync>(model, dp_async_ ? *dp_async_ : dp, *part_, g,
                                      [this](int u) { return unit_params(u); });
  model_.set_hooks(this);
}

ZeroEngine::~ZeroEngine() {
  release_all();
  model_.set_hooks(nullptr);
}

float* ZeroEngine::unit_params(int unit) {
  if (opt_.stage < 3) return params_.data() + part_->unit_padded_begin(unit);
  // Stage 3: segments are single units, so the unit starts its gathered buffer.
  FloatBuffer& buf = gathered_[size_t(unit)].buf;
  return buf.size() ? buf.data() : nullptr;
}

void ZeroEngine::track(int64_t delta) {
  gathered_bytes_ += delta;
  if (gathered_bytes_ > peak_gathered_bytes_) peak_gathered_bytes_ = gathered_bytes_;
}

void ZeroEngine::note_scratch(uint64_t bytes) {
  uint64_t most = peak_scratch_bytes_.load();
  while (bytes > most && !peak_scratch_bytes_.compare_exchange_weak(most, bytes)) {
  }
}

void ZeroEngine::gather_start(int unit, bool forward) {
  Gathered& g = gathered_[size_t(unit)];
  if (g.buf.size()) return;
  const int s = part_->segment_of_unit(unit);
  const Partition::Segment& seg = part_->segments()[size_t(s)];
  g.buf.resize(size_t(seg.layout.padded));
  track(int64_t(g.buf.bytes()));
  g.forward = forward;
  // hpZ: the backward gather assembles the unit from the node's secondary shards.
  const bool secondary = opt_.comm.hpz && !forward;
  Communicator& comm = gathers(secondary);
  const float* shard = params_.data() + seg.local_begin;
  size_t count = size_t(seg.layout.shard);
  if (secondary) {
    const FloatBuffer& sec = secondary_[size_t(unit)];
    ODY_CHECK(sec.size(), "hpZ: unit {} has no secondary shard for its backward gather", unit);
    shard = sec.data();
    count = sec.size();
  }
  if (opt_.comm.weights != WeightComm::none) {
    const RoundingKey key{opt_.comm.seed, grad_round_, uint32_t(dp_.rank()), uint32_t(s), 0};
    g.quantized.start(comm, weight_format_, shard, count, key);
  } else if (opt_.bf16) {
    // The master shard rounded, gathered as bf16 and widened in acquire (the bf16 model copy of the unit).
    g.send.resize(count);
    g.recv.resize(g.buf.size());
    convert_to_bf16(shard, g.send.data(), count);
    g.request = comm.all_gather_async(g.send.data(), g.recv.data(), count, DType::bf16);
  } else {
    g.request = comm.all_gather_async(shard, g.buf.data(), count, DType::f32);
  }
  g.wire = g.quantized.scratch_bytes() + (g.send.size() + g.recv.size()) * sizeof(bf16);
  track(int64_t(g.wire));
}

Communicator& ZeroEngine::gathers(bool secondary) {
  if (secondary) return intra_async_ ? *intra_async_ : *intra_;
  return dp_async_ ? *dp_async_ : dp_;
}

void ZeroEngine::add_blocked(double seconds, bool collective) {
  exposed_seconds_ += seconds;
  if (collective) main_comm_seconds_ += seconds;  // ran on the main thread: none of it hidden
}

void ZeroEngine::acquire(int unit) {
  gather_start(unit, true);
  Gathered& g = gathered_[size_t(unit)];
  Timer waited;
  if (g.request) {
    g.request->wait();
    g.request.reset();
  }
  if (g.quantized.active()) g.quantized.finish(g.buf.data());
  add_blocked(waited.seconds(), false);
  if (g.recv.size()) convert_to_float(g.recv.data(), g.buf.data(), g.recv.size());
  g.send = {}, g.recv = {};
  track(-int64_t(g.wire));
  g.wire = 0;
  if (opt_.comm.hpz && g.forward && !secondary_[size_t(unit)].size()) {
    // Keep my 1/D of the forward-gathered unit until the next optimizer step.
    const size_t part = size_t(sizes_.secondary_floats(int64_t(g.buf.size())));
    FloatBuffer& sec = secondary_[size_t(unit)];
    sec.resize(part);
    std::copy_n(g.buf.data() + size_t(intra_->rank()) * part, part, sec.data());
    track(int64_t(sec.bytes()));
  }
}

void ZeroEngine::release(int unit) {
  Gathered& g = gathered_[size_t(unit)];
  Timer waited;
  if (g.request) g.request->wait();
  g.request.reset();
  if (g.quantized.active()) g.quantized.finish(g.buf.data());
  add_blocked(waited.seconds(), false);
  track(-int64_t(g.buf.bytes() + g.wire));
  g.send = {}, g.recv = {};
  g.wire = 0;
  g.buf.resize(0);
}

void ZeroEngine::release_all() {
  wait_weight_gathers();
  for (int u = 0; u < int(gathered_.size()); ++u) release(u);
}

void ZeroEngine::drop_secondaries() {
  for (FloatBuffer& sec : secondary_) {
    track(-int64_t(sec.bytes()));
    sec.resize(0);
  }
}

int ZeroEngine::forward_use(int unit) const {
  const std::vector<int>& uses = uses_.forward[size_t(unit)];
  ODY_CHECK(!uses.empty(), "ZeRO-3: unit {} has no forward use in the model's schedule", unit);
  return uses[size_t(next_forward_[size_t(unit)])];
}

void ZeroEngine::prefetch_after(int position) {
  if (position + 1 < int(schedule_.size())) {
    const UnitUse& next = schedule_[size_t(position) + 1];
    gather_start(next.unit, next.forward);  // nothing when the unit is held
  }
}

void ZeroEngine::before_forward(int unit) {
  if (opt_.stage < 3) {
    const size_t s = size_t(part_->segment_of_unit(unit));
    if (s < weight_gathers_.size() && weight_gathers_[s].request) {
      Timer waited;
      weight_gathers_[s].finish();
      add_blocked(waited.seconds(), false);
    }
    return;
  }
  acquire(unit);
  model_.set_unit_storage(unit, unit_params(unit), grads_->unit_grads(unit));
  prefetch_after(forward_use(unit));
}

void ZeroEngine::after_forward(int unit) {
  if (opt_.stage < 3) return;
  const int position = forward_use(unit);
  int& next = next_forward_[size_t(unit)];
  next = (next + 1) % int(uses_.forward[size_t(unit)].size());
  // Kept when the unit's next use follows at once (GPT-2's LM head and its backward).
  const bool kept = position + 1 < int(schedule_.size()) && schedule_[size_t(position) + 1].unit == unit;
  if (!kept) release(unit);
}

void ZeroEngine::before_backward(int unit) {
  if (opt_.stage == 3) {
    gather_start(unit, false);
    acquire(unit);
    prefetch_after(uses_.backward[size_t(unit)]);
  }
  grads_->before_backward(unit);
}

void ZeroEngine::after_backward(int unit) {
  grads_->after_backward(unit);
  if (opt_.stage == 3) release(unit);
}

void ZeroEngine::load(const float* params, std::span<const float* const> state, const float* weights) {
  release_all();
  std::fill(next_forward_.begin(), next_forward_.end(), 0);
  ODY_CHECK(weights == nullptr || master_.size(), "ZeRO: a weight replica given to an engine without one");
  ODY_CHECK(state.empty() || state.size() == state_.size(),
            "ZeRO: {} optimizer state buffers given, the optimizer has {}", state.size(), state_.size());
  if (opt_.stage == 3)
    part_->dense_to_local(params, params_.data());
  else
    part_->dense_to_padded(weights ? weights : params, params_.data());
  if (master_.size()) part_->dense_to_local(params, master_.data());
  if (opt_.bf16 && opt_.stage <= 2) round_bf16_rows(params_.data(), 1, int64_t(params_.size()));
  drop_secondaries();
  // Stage 0's partition is one rank, where local is the whole buffer.
  for (size_t k = 0; k < state_.size(); ++k) {
    if (state.empty())
      state_[k].zero();
    else
      part_->dense_to_local(state[k], state_[k].data());
  }
}

std::vector<Range> ZeroEngine::param_ranges_loaded() const {
  if (opt_.stage == 3) return part_->local_dense_ranges();
  return {Range{0, part_->dense_total()}};
}

void ZeroEngine::set_completed_steps(int64_t steps) {
  ODY_CHECK(steps >= 0, "ZeRO: {} completed steps", steps);
  grad_round_ = uint32_t(steps);  // zero_grad starts step steps + 1
}

nlohmann::json ZeroEngine::replica_layout() const {
  const WireFormat& f = weight_format_;
  return {{"dp", dp_.size()},
          {"zero_stage", opt_.stage},
          {"padded_total", part_->padded_total()},
          {"segments", part_->segments().size()},
          {"weights", enum_name(kWeightCommNames, opt_.comm.weights)},
          {"identity", f.identity}};
}

void ZeroEngine::gather_params_to_root(float* params) {
  release_all();
  const int P = part_->ranks(), rank = part_->rank();
  const size_t n = size_t(part_->local_total());
  // Rank 0 receives every rank's local slices in turn (one rank's worth of scratch at a time).
  auto collect = [&](const float* local, float* dense, int tag) {
    if (rank != 0) {
      dp_.send(local, n, DType::f32, 0, tag);
      return;
    }
    part_->local_to_dense(local, dense, 0);
    FloatBuffer scratch(P > 1 ? n : 0);
    for (int r = 1; r < P; ++r) {
      dp_.recv(scratch.data(), n, DType::f32, r, tag);
      part_->local_to_dense(scratch.data(), dense, r);
    }
  };
  if (opt_.stage == 3)
    collect(params_.data(), params, p2p_tag::zero_gather_params);
  else if (opt_.stage == 0 && master_.size()) {
    if (dp_.rank() == 0) part_->local_to_dense(master_.data(), params, 0);  // every rank holds it all
  } else if (master_.size())
    collect(master_.data(), params,
            p2p_tag::zero_gather_params);  // the master, not the (quantized) model copy
  else if (dp_.rank() == 0)
    part_->padded_to_dense(params_.data(), params);
}

void ZeroEngine::zero_grad() {
  grads_->zero_grad();
  ++grad_round_;
  micro_ = 0;
  traffic_ = {};
}

ZeroEngine::Snapshot ZeroEngine::snapshot() const {
  const CommStats& st = dp_.stats();
  Snapshot s{};
  for (int intra = 0; intra < 2; ++intra) {
    s.gather[intra] = st.bytes(CommKind::all_gather, intra);
    s.reduce[intra] = st.bytes(CommKind::reduce_scatter, intra) + st.bytes(CommKind::all_to_all, intra) +
                      st.bytes(CommKind::all_reduce, intra);
  }
  return s;
}

void ZeroEngine::add_traffic(const Snapshot& before, bool gathers_are_weights) {
  const Snapshot now = snapshot();
  traffic_.grads_inter += now.reduce[0] - before.reduce[0];
  traffic_.grads_intra += now.reduce[1] - before.reduce[1];
  if (!gathers_are_weights) return;
  traffic_.weights_inter += now.gather[0] - before.gather[0];
  traffic_.weights_intra += now.gather[1] - before.gather[1];
}

void ZeroEngine::begin_micro_step(bool last) {
  grads_->begin_micro_step(last);
  micro_start_ = snapshot();
}

void ZeroEngine::end_micro_step() {
  grads_->finish();
  ++micro_;
  add_traffic(micro_start_, true);  // stage 3's unit gathers are weights
}

RequestPtr ZeroEngine::reduce_scatter_compressed(const float* send, float* recv, size_t S, int segment) {
  const uint32_t bucket = uint32_t(segment) + uint32_t(part_->segments().size()) * micro_;
  const RoundingKey key{opt_.comm.seed, grad_round_, uint32_t(dp_.rank()), bucket, 0};
  // On the thread, the whole reduction (encode, exchange, decode) runs there, on its communicators.
  Communicator& dp = thread_ ? *dp_own_ : dp_;
  Communicator* intra = thread_ ? intra_own_.get() : intra_.get();
  Communicator* inter = thread_ ? inter_own_.get() : inter_.get();
  auto reduce = [=, this, &dp] {
    if (two_level_grads_)
      note_scratch(two_level_reduce_scatter(*intra, *inter, grad_intra_format_, grad_inter_format_, send,
                                            recv, S, key, size_t(opt_.comm.grad_pipeline)));
    else
      note_scratch(one_level_reduce_scatter(dp, grad_intra_format_, send, recv, S, key));
  };
  if (thread_) return thread_->run(reduce);
  Timer took;
  reduce();
  add_blocked(took.seconds(), true);
  return nullptr;
}

ExposedComm ZeroEngine::take_exposed_comm() {
  ExposedComm c;
  const double grad_wait = grads_->wait_seconds();
  c.exposed_seconds = exposed_seconds_ + (grad_wait - grad_wait_mark_);
  grad_wait_mark_ = grad_wait;
  if (thread_) {
    c.threaded = true;
    c.comm_seconds = thread_->take_times().comm_seconds + main_comm_seconds_;
  }
  exposed_seconds_ = main_comm_seconds_ = 0;
  return c;
}

void ZeroEngine::gather_weights_after_step(int64_t step) {
  Timer took;
  const Snapshot before = snapshot();
  const int r = dp_.rank();
  const std::vector<Partition::Segment>& segs = part_->segments();
  // Every rank's updated slices back into the full parameters, per segment. On the communication
  // thread (fp32 and bf16) they run on while the next step starts: a segment is waited for before the
  // first forward use of one of its units (before_forward), all of them before anything else reads or
  // writes the replica (release_all).
  std::vector<WeightGather> gathers_left;
  if (opt_.bf16) {
    gather_bf16_weights_after_step(gathers_left);
  } else if (opt_.comm.weights == WeightComm::none) {
    for (const Partition::Segment& seg : segs) {
      float* base = params_.data() + seg.padded_begin;
      gathers_left.push_back({gathers(false).all_gather_async(base + seg.layout.shard_range(r).begin, base,
                                                              size_t(seg.layout.shard), DType::f32)});
    }
  } else {
    for (size_t s = 0; s < segs.size(); ++s) {
      const Partition::Segment& seg = segs[s];
      float* model = params_.data() + seg.padded_begin;
      const float* master = master_.data() + seg.local_begin;
      const size_t S = size_t(seg.layout.shard);
      const RoundingKey key{opt_.comm.seed, uint32_t(step), uint32_t(r), uint32_t(s), 0};
      if (opt_.comm.weights == WeightComm::qwd) {
        note_scratch(qwd_all_gather(dp_, weight_format_, master, model, S, key));
      } else {
        QuantizedGather g;
        g.start(dp_, weight_format_, master, S, key);
        note_scratch(g.scratch_bytes());
        g.finish(model);
      }
    }
  }
  if (thread_) {
    weight_gathers_ = std::move(gathers_left);
  } else {
    for (WeightGather& g : gathers_left) g.finish();
    weight_send_ = {}, weight_recv_ = {};
  }
  const Snapshot now = snapshot();
  traffic_.weights_inter += now.gather[0] - before.gather[0];
  traffic_.weights_intra += now.gather[1] - before.gather[1];
  add_blocked(took.seconds(), weight_gathers_.empty());  // deferred: their time is the thread's
}

void ZeroEngine::WeightGather::finish() {
  if (!request) return;
  request->wait();
  request.reset();
  if (count) convert_to_float(gathered, model, count);
}

void ZeroEngine::wait_weight_gathers() const {
  for (WeightGather& g : weight_gathers_) g.finish();
  weight_gathers_.clear();
  weight_send_ = {}, weight_recv_ = {};
}

GradNormPart ZeroEngine::grad_norm_part() {
  if (opt_.stage == 0) return {{grads_->full_grads(), size_t(part_->padded_total())}, nullptr};
  return {{grads_->shard_grads(), size_t(part_->local_total())}, &dp_};
}

std::vector<ZeroEngine::GradRun> ZeroEngine::reduced_grad_runs() {
  std::vector<GradRun> runs;
  for (const Partition::Segment& seg : part_->segments()) {
    if (opt_.stage == 0) {
      runs.push_back({seg.dense.begin, seg.dense.end, grads_->full_grads() + seg.padded_begin});
      continue;
    }
    const Range valid = seg.layout.valid_range(part_->rank());
    if (valid.empty()) continue;
    runs.push_back({seg.dense.begin + valid.begin, seg.dense.begin + valid.end,
                    grads_->shard_grads() + seg.local_begin +
                        (valid.begin - seg.layout.shard_range(part_->rank()).begin)});
  }
  return runs;
}

void ZeroEngine::step(float lr, int64_t step, float grad_scale) {
  release_all();  // gathered copies go stale with the update
  drop_secondaries();
  const auto& tensors = model_.table().tensors();
  float* grads = opt_.stage == 0 ? grads_->full_grads() : grads_->shard_grads();
  std::vector<float*> state(state_.size());
  for (const Partition::LocalSlice& s : part_->local_slices()) {
    float* p = master_.size() ? master_.data() + s.local_begin
                              : params_.data() + (opt_.stage == 3 ? s.local_begin : s.padded_begin);
    // Stage 0's one-rank partition has local == padded.
    for (size_t k = 0; k < state_.size(); ++k) state[k] = state_[k].data() + s.local_begin;
    optimizer_.update(p, grads + s.local_begin, state.data(), size_t(s.size), lr, step, grad_scale,
                      tensors[size_t(s.tensor)].weight_decay);
  }
  if (opt_.bf16 && opt_.stage == 0) round_replica();
  if (opt_.stage == 1 || opt_.stage == 2) gather_weights_after_step(step);
}

void ZeroEngine::round_replica() {
  for (const Partition::LocalSlice& s : part_->local_slices())
    copy_round_bf16(params_.data() + s.padded_begin, master_.data() + s.local_begin, size_t(s.size));
}

// Each segment's master shard rounded to bf16 and all-gathered as bf16, to be widened into the model
// copy when it completes (WeightGather::finish).
void ZeroEngine::gather_bf16_weights_after_step(std::vector<WeightGather>& gathers_left) {
  weight_send_.resize(size_t(part_->local_total()));
  weight_recv_.resize(size_t(part_->padded_total()));
  convert_to_bf16(master_.data(), weight_send_.data(), weight_send_.size());
  for (const Partition::Segment& seg : part_->segments()) {
    bf16* recv = weight_recv_.data() + seg.padded_begin;
    gathers_left.push_back({gathers(false).all_gather_async(weight_send_.data() + seg.local_begin, recv,
                                                            size_t(seg.layout.shard), DType::bf16),
                            recv, params_.data() + seg.padded_begin, size_t(seg.layout.padded)});
  }
  note_scratch((weight_send_.size() + weight_recv_.size()) * sizeof(bf16));
}

MemoryReport ZeroEngine::memory() const {
  MemoryReport r;
  r.params = params_.bytes() + master_.bytes();
  r.grads = grads_->grad_bytes();
  for (const FloatBuffer& st : state_) r.optimizer += st.bytes();
  r.activations = model_.activation_bytes();
  // (hpZ's secondary shards are counted with the gathered units: they live from a forward to the step.)
  r.comm_buffers = uint64_t(peak_gathered_bytes_) + grads_->peak_buffer_bytes() + peak_scratch_bytes();
  return r;
}

}  // namespace odyssey
