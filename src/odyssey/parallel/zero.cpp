#include "odyssey/parallel/zero.h"

#include <cmath>

#include "odyssey/core/error.h"
#include "odyssey/optim/grad_clip.h"

namespace odyssey {

nlohmann::json MemoryReport::to_json() const {
  return {{"params", params},
          {"grads", grads},
          {"optimizer", optimizer},
          {"activations", activations},
          {"comm_buffers", comm_buffers},
          {"total", total()}};
}

ZeroEngine::ZeroEngine(GPT2& model, Communicator& dp, const ZeroOptions& options)
    : model_(model), dp_(dp), opt_(options) {
  ODY_CHECK(opt_.stage >= 0 && opt_.stage <= 3, "parallel.zero_stage must be 0, 1, 2 or 3, got {}",
            opt_.stage);
  ODY_CHECK(model.params() == nullptr,
            "ZeRO: the model must be built without storage (allocate_storage=false)");
  const ParamTable& table = model.table();
  const int64_t bucket_bytes = opt_.stage == 3 ? 0 : int64_t(opt_.bucket_mb * 1e6);
  // Stage 0 shards nothing: a one-rank partition makes "local" the whole (unpadded) buffer.
  const bool sharded = opt_.stage > 0;
  part_ = std::make_unique<Partition>(table, build_buckets(table, bucket_bytes), sharded ? dp.size() : 1,
                                      sharded ? dp.rank() : 0);
  params_.resize(size_t(opt_.stage == 3 ? part_->local_total() : part_->padded_total()));
  m_.resize(size_t(part_->local_total()));
  v_.resize(size_t(part_->local_total()));
  if (opt_.stage == 3) gathered_.resize(size_t(table.num_units()));

  GradSync::Options g;
  g.reduce_scatter = sharded;
  g.every_micro_step = opt_.stage >= 2;
  g.pooled = opt_.stage >= 2;
  g.overlap = opt_.overlap;
  g.max_in_flight = opt_.max_in_flight;
  grads_ = std::make_unique<GradSync>(model, dp, *part_, g, [this](int u) { return unit_params(u); });
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

void ZeroEngine::gather_start(int unit) {
  Gathered& g = gathered_[size_t(unit)];
  if (g.buf.size()) return;
  const Partition::Segment& seg = part_->segments()[size_t(part_->segment_of_unit(unit))];
  g.buf.resize(size_t(seg.layout.padded));
  track(int64_t(g.buf.bytes()));
  g.request = dp_.all_gather_async(params_.data() + seg.local_begin, g.buf.data(), size_t(seg.layout.shard),
                                   DType::f32);
}

void ZeroEngine::acquire(int unit) {
  gather_start(unit);
  Gathered& g = gathered_[size_t(unit)];
  if (g.request) {
    g.request->wait();
    g.request.reset();
  }
}

void ZeroEngine::release(int unit) {
  Gathered& g = gathered_[size_t(unit)];
  if (g.request) g.request->wait();
  g.request.reset();
  track(-int64_t(g.buf.bytes()));
  g.buf.resize(0);
}

void ZeroEngine::release_all() {
  for (int u = 0; u < int(gathered_.size()); ++u) release(u);
}

// Forward order: 0 (embeddings), 1..L, L+1 (final norm), 0 (LM head). Each use prefetches the next.
void ZeroEngine::before_forward(int unit) {
  if (opt_.stage < 3) return;
  acquire(unit);
  model_.set_unit_storage(unit, unit_params(unit), grads_->unit_grads(unit));
  const int final_unit = model_.table().final_unit();
  if (unit == 0 && !head_next_)
    gather_start(1);
  else if (unit == final_unit)
    gather_start(0);
  else if (unit != 0)
    gather_start(unit + 1);
}

void ZeroEngine::after_forward(int unit) {
  if (opt_.stage < 3) return;
  if (unit == 0 && head_next_) {
    head_next_ = false;  // the LM head: keep unit 0 for its backward (and the embedding backward)
    return;
  }
  release(unit);
  if (unit == model_.table().final_unit()) head_next_ = true;
}

// Backward order: 0 (LM head), L+1, L..1, then the embeddings with unit 0 still held.
void ZeroEngine::before_backward(int unit) {
  if (opt_.stage == 3) {
    acquire(unit);
    const int next = unit == 0 ? model_.table().final_unit() : unit - 1;
    if (next >= 1) gather_start(next);
  }
  grads_->before_backward(unit);
}

void ZeroEngine::after_backward(int unit) {
  grads_->after_backward(unit);
  if (opt_.stage == 3) release(unit);
}

void ZeroEngine::load(const float* params, const float* m, const float* v) {
  release_all();
  head_next_ = false;
  if (opt_.stage == 3)
    part_->dense_to_local(params, params_.data());
  else
    part_->dense_to_padded(params, params_.data());
  // Stage 0's partition is one rank, where local is the whole buffer.
  if (m)
    part_->dense_to_local(m, m_.data());
  else
    m_.zero();
  if (v)
    part_->dense_to_local(v, v_.data());
  else
    v_.zero();
}

void ZeroEngine::gather_to_root(float* params, float* m, float* v, bool with_moments) {
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
    collect(params_.data(), params, 1);
  else if (dp_.rank() == 0)
    part_->padded_to_dense(params_.data(), params);
  if (!with_moments) return;
  if (opt_.stage == 0) {
    if (dp_.rank() == 0) {
      part_->local_to_dense(m_.data(), m, 0);
      part_->local_to_dense(v_.data(), v, 0);
    }
    return;
  }
  collect(m_.data(), m, 2);
  collect(v_.data(), v, 3);
}

void ZeroEngine::zero_grad() {
  grads_->zero_grad();
}

double ZeroEngine::grad_norm() {
  if (opt_.stage == 0) return std::sqrt(sum_of_squares(grads_->full_grads(), size_t(part_->padded_total())));
  // Partial sums gathered and added in rank order: exact doubles, the same on every rank.
  double local = sum_of_squares(grads_->shard_grads(), size_t(part_->local_total()));
  std::vector<double> all(size_t(dp_.size()));
  dp_.all_gather(&local, all.data(), sizeof(double), DType::u8);
  double sum = 0;
  for (double s : all) sum += s;
  return std::sqrt(sum);
}

void ZeroEngine::step(const AdamWConfig& config, float lr, int64_t step, float grad_scale) {
  release_all();  // gathered copies go stale with the update
  const auto& tensors = model_.table().tensors();
  float* grads = opt_.stage == 0 ? grads_->full_grads() : grads_->shard_grads();
  for (const Partition::LocalSlice& s : part_->local_slices()) {
    float* p = params_.data() + (opt_.stage == 3 ? s.local_begin : s.padded_begin);
    // Stage 0's one-rank partition has local == padded.
    adamw_update(p, grads + s.local_begin, m_.data() + s.local_begin, v_.data() + s.local_begin,
                 size_t(s.size), config, lr, step, grad_scale, tensors[size_t(s.tensor)].weight_decay);
  }
  if (opt_.stage == 1 || opt_.stage == 2) {
    // Every rank's updated slices back into the full parameters, in place.
    std::vector<RequestPtr> requests;
    const int r = dp_.rank();
    for (const Partition::Segment& seg : part_->segments()) {
      float* base = params_.data() + seg.padded_begin;
      requests.push_back(dp_.all_gather_async(base + seg.layout.shard_range(r).begin, base,
                                              size_t(seg.layout.shard), DType::f32));
    }
    for (RequestPtr& q : requests) q->wait();
  }
}

MemoryReport ZeroEngine::memory() const {
  MemoryReport r;
  r.params = params_.bytes();
  r.grads = grads_->grad_bytes();
  r.optimizer = m_.bytes() + v_.bytes();
  r.activations = model_.activations().bytes();
  r.comm_buffers = uint64_t(peak_gathered_bytes_) + grads_->peak_buffer_bytes();
  return r;
}

}  // namespace odyssey
