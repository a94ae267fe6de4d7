// A communication thread: the collectives of one communicator of its own (a duplicate of a group),
// run in the order they were started, by a thread beside the compute (tensor-pipeline-parallelism.md
// §2.4). Domino needs its tensor-parallel reductions to progress while the rank computes; Open MPI's
// non-blocking collectives advance only inside MPI calls, and a GEMM makes none for its whole length,
// so a periodic MPI_Test from the compute loop would progress them only between ops. The thread
// starts each collective and polls it (Request::test with a short sleep between polls, so that it
// leaves the cores to the compute instead of spinning in a blocking MPI call).
//
// Every rank must start the same collectives in the same order (the program order of the blocks);
// the thread runs them first in, first out, so they match across ranks. With MPI this needs
// MPI_THREAD_MULTIPLE (the main thread keeps calling MPI on other communicators): the owner checks
// runtime_thread_multiple() (comm/runtime.h) before building one over an MPI communicator.
//
// Overlap accounting: the thread adds up the time each collective took from its start to its
// completion, the waiting side the time it was blocked in wait(); hidden = 1 - waited / took.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "odyssey/comm/communicator.h"

namespace odyssey {

struct OverlapTimes {
  double comm_seconds = 0;  // collectives from start to completion, on the thread
  double wait_seconds = 0;  // the compute blocked waiting for them
  // The fraction of the collectives' time the compute did not wait for, in [0, 1] (1 without any).
  double hidden_fraction() const;
};

class CommThread {
 public:
  // comm: the communicator the thread alone uses from now on.
  explicit CommThread(std::unique_ptr<Communicator> comm);
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  // As Communicator's (f32 sums; the buffers must stay valid until the request is waited on).
  RequestPtr all_reduce(float* data, size_t count);
  RequestPtr reduce_scatter(const float* send, float* recv, size_t count);

  // The times since the last call (collectives still in flight count when they complete).
  OverlapTimes take_times();

 private:
  struct Job;
  class JobRequest;
  RequestPtr submit(std::function<RequestPtr(Communicator&)> start);
  void run();

  std::unique_ptr<Communicator> comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  OverlapTimes times_;
  std::thread thread_;
};

}  // namespace odyssey
