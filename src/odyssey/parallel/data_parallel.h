// Data-parallel gradient reduction in buckets, overlapped with backward.
//
// A bucket is a contiguous run of whole units. Buckets are built from the end of the buffer backward
// (backward produces the last layers first), each of at least bucket_bytes, so the first bucket is
// ready early and its reduction runs while earlier layers are still being differentiated.
//
// GradSync is the LayerHooks half of that: after_backward(u) starts a non-blocking all-reduce (ZeRO-0)
// or reduce-scatter (ZeRO-1/2/3) of every bucket that u completes; before_backward(u) tests the
// requests in flight so MPI makes progress during compute; finish() waits for the rest. The loss is
// already scaled by 1 / (global tokens), so reductions are plain sums.
//
// A reduction's buffers (its pooled bucket, its receive scratch) are released when the engine must wait
// for it (max_in_flight reached, finish()), oldest first, never when a test happens to find it done: what
// the buffers hold then depends on the schedule alone, not on MPI's timing, so the footprint
// (train/footprint.h) equals it byte for byte.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/buffer.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/shard.h"

namespace odyssey {

// Unit ranges [begin, end) in increasing unit order; built from the last unit down, a bucket closes
// once it holds >= bucket_bytes (the one holding unit 0 takes what is left). bucket_bytes <= 0: one
// unit per bucket.
std::vector<std::pair<int, int>> build_buckets(const ParamTable& table, int64_t bucket_bytes);

class GradSync : public LayerHooks {
 public:
  struct Options {
    bool reduce_scatter = false;    // false: all-reduce into the full buffer (ZeRO-0)
    bool every_micro_step = false;  // reduce after every micro-step (ZeRO-2/3), else only the last
    bool pooled = false;            // a bucket's gradients exist only while needed (ZeRO-2/3)
    bool overlap = true;            // false: every bucket is launched in finish() (for benchmarks)
    int max_in_flight = 2;          // pooled: buckets being reduced at once (bounds the buffers)
    // Replaces a bucket's reduce-scatter (compressed collectives): (send [padded segment], recv [shard],
    // shard size, segment); returns its request, or null when it ran to completion.
    std::function<RequestPtr(const float*, float*, size_t, int)> reduce_scatter_fn;
  };
  // The partition's segments are the buckets. unit_params(u) gives the storage of unit u's parameters
  // (set_unit_storage sets both). Not pooled: gradients live in a full buffer in the padded layout.
  GradSync(Stage& model, Communicator& dp, const Partition& partition, const Options& options,
           std::function<float*(int)> unit_params);
  ~GradSync() override;

  void zero_grad();                  // start of an optimizer step
  void begin_micro_step(bool last);  // whether this micro-step's buckets are reduced
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  void finish();  // waits for every reduction started (and launches them when not overlapping)

  float* unit_grads(int unit);                    // current gradient storage of a unit (null when not held)
  float* full_grads() { return full_.data(); }    // not pooled: [padded_total]
  float* shard_grads() { return shard_.data(); }  // reduce-scatter: [local_total]
  // Bytes: persistent gradient storage, and the peak of bucket buffers + receive scratch.
  uint64_t grad_bytes() const { return full_.bytes() + shard_.bytes(); }
  uint64_t peak_buffer_bytes() const { return peak_buffer_bytes_; }
  double wait_seconds() const { return wait_seconds_; }  // time blocked in finish() and in waits

 private:
  struct InFlight {
    int segment;
    RequestPtr request;
    FloatBuffer scratch;  // receive buffer when adding into the shard
    bool done = false;    // a test found it complete (completed, and its buffers released, in order)
  };
  void acquire(int segment);
  void launch(int segment);
  void complete(InFlight& f);
  void wait_oldest();
  void progress();
  void track(int64_t delta_bytes);

  Stage& model_;
  Communicator& dp_;
  const Partition& part_;
  Options opt_;
  std::function<float*(int)> unit_params_;
  FloatBuffer full_, shard_;
  std::vector<FloatBuffer> bucket_;  // pooled: per segment, held between first use and reduction
  std::vector<bool> pending_;        // not overlapping: completed, waiting for finish()
  std::deque<InFlight> in_flight_;
  bool reduce_now_ = true, shard_written_ = false;
  int64_t buffer_bytes_ = 0, peak_buffer_bytes_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace odyssey
