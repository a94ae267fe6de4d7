#include "odyssey/parallel/data_parallel.h"

#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"

namespace odyssey {

std::vector<std::pair<int, int>> build_buckets(const ParamTable& table, int64_t bucket_bytes) {
  std::vector<std::pair<int, int>> buckets;
  int end = table.num_units();
  int64_t bytes = 0;
  for (int u = table.num_units() - 1; u >= 0; --u) {
    bytes += table.unit_size(u) * int64_t(sizeof(float));
    if (bytes >= bucket_bytes || u == 0) {
      buckets.insert(buckets.begin(), {u, end});
      end = u;
      bytes = 0;
    }
  }
  return buckets;
}

GradSync::GradSync(Stage& model, Communicator& dp, const Partition& partition, const Options& options,
                   std::function<float*(int)> unit_params)
    : model_(model), dp_(dp), part_(partition), opt_(options), unit_params_(std::move(unit_params)) {
  ODY_CHECK(!opt_.pooled || (opt_.reduce_scatter && opt_.every_micro_step),
            "gradient sync: pooled buckets must be reduce-scattered every micro-step");
  ODY_CHECK(opt_.max_in_flight >= 1, "gradient sync: max_in_flight must be >= 1");
  const size_t segments = part_.segments().size();
  bucket_.resize(segments);
  pending_.assign(segments, false);
  if (!opt_.pooled) full_.resize(size_t(part_.padded_total()));
  if (opt_.reduce_scatter) shard_.resize(size_t(part_.local_total()));
  for (int u = 0; u < model_.table().num_units(); ++u)
    model_.set_unit_storage(u, unit_params_(u), unit_grads(u));
}

GradSync::~GradSync() {
  // Requests reference our buffers: complete them before the buffers go.
  for (InFlight& f : in_flight_) f.request->wait();
}

float* GradSync::unit_grads(int unit) {
  const int s = part_.segment_of_unit(unit);
  const Partition::Segment& seg = part_.segments()[size_t(s)];
  const int64_t in_seg = model_.table().unit_begin(unit) - seg.dense.begin;
  if (!opt_.pooled) return full_.data() + seg.padded_begin + in_seg;
  return bucket_[size_t(s)].size() ? bucket_[size_t(s)].data() + in_seg : nullptr;
}

void GradSync::track(int64_t delta) {
  buffer_bytes_ += delta;
  if (buffer_bytes_ > peak_buffer_bytes_) peak_buffer_bytes_ = buffer_bytes_;
}

void GradSync::zero_grad() {
  ODY_CHECK(in_flight_.empty(), "gradient sync: zero_grad with reductions in flight");
  full_.zero();
  shard_written_ = false;
}

void GradSync::begin_micro_step(bool last) {
  reduce_now_ = opt_.every_micro_step || last;
}

void GradSync::acquire(int s) {
  if (bucket_[size_t(s)].size()) return;
  while (int(in_flight_.size()) >= opt_.max_in_flight) wait_oldest();
  const Partition::Segment& seg = part_.segments()[size_t(s)];
  bucket_[size_t(s)].resize(size_t(seg.layout.padded));  // zeroed, padding included
  track(int64_t(bucket_[size_t(s)].bytes()));
}

void GradSync::before_backward(int unit) {
  progress();
  if (opt_.pooled) acquire(part_.segment_of_unit(unit));
  model_.set_unit_storage(unit, unit_params_(unit), unit_grads(unit));
}

void GradSync::after_backward(int unit) {
  const int s = part_.segment_of_unit(unit);
  // Backward runs units downward, so a bucket is complete when its lowest unit is.
  if (!reduce_now_ || unit != part_.segments()[size_t(s)].unit_begin) return;
  if (opt_.overlap)
    launch(s);
  else
    pending_[size_t(s)] = true;
}

void GradSync::launch(int s) {
  const Partition::Segment& seg = part_.segments()[size_t(s)];
  float* grads = opt_.pooled ? bucket_[size_t(s)].data() : full_.data() + seg.padded_begin;
  InFlight f{s, nullptr, {}};
  if (!opt_.reduce_scatter) {
    f.request = dp_.all_reduce_async(grads, size_t(seg.dense.size()), DType::f32);
  } else {
    // The first reduction of a step lands in the shard; later micro-steps add theirs.
    float* recv = shard_.data() + seg.local_begin;
    if (shard_written_) {
      f.scratch.resize(size_t(seg.layout.shard));
      track(int64_t(f.scratch.bytes()));
      recv = f.scratch.data();
    }
    if (opt_.reduce_scatter_fn) {
      f.request = opt_.reduce_scatter_fn(grads, recv, size_t(seg.layout.shard), s);
      if (!f.request) f.request = std::make_unique<CompletedRequest>();
    } else {
      f.request = dp_.reduce_scatter_async(grads, recv, size_t(seg.layout.shard), DType::f32);
    }
  }
  in_flight_.push_back(std::move(f));
}

void GradSync::complete(InFlight& f) {
  const Partition::Segment& seg = part_.segments()[size_t(f.segment)];
  if (f.scratch.size()) {
    float* dst = shard_.data() + seg.local_begin;
    const float* src = f.scratch.data();
    for (int64_t i = 0; i < seg.layout.shard; ++i) dst[i] += src[i];
    track(-int64_t(f.scratch.bytes()));
    f.scratch.resize(0);
  }
  if (opt_.pooled) {
    track(-int64_t(bucket_[size_t(f.segment)].bytes()));
    bucket_[size_t(f.segment)].resize(0);
    for (int u = seg.unit_begin; u < seg.unit_end; ++u) model_.set_unit_storage(u, unit_params_(u), nullptr);
  }
}

void GradSync::wait_oldest() {
  InFlight& f = in_flight_.front();
  if (!f.done) {
    Timer t;
    f.request->wait();
    wait_seconds_ += t.seconds();
  }
  complete(f);
  in_flight_.pop_front();
}

void GradSync::progress() {
  // Tests only (MPI progresses inside them): completion waits for wait_oldest, so the buffers held do
  // not depend on when a reduction happens to finish.
  for (InFlight& f : in_flight_)
    if (!f.done) f.done = f.request->test();
}

void GradSync::finish() {
  // Without overlap, launch in the order backward would have (last bucket first).
  for (int s = int(pending_.size()) - 1; s >= 0; --s)
    if (pending_[size_t(s)]) {
      pending_[size_t(s)] = false;
      launch(s);
    }
  while (!in_flight_.empty()) wait_oldest();
  if (reduce_now_ && opt_.reduce_scatter) shard_written_ = true;
}

}  // namespace odyssey
