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
//
// ZeRO (parallel/zero.h) runs its unit gathers and gradient reductions on one: a ThreadedCommunicator
// is a Communicator whose every call the thread runs on a communicator of its own, so code written
// against Communicator (the bucket reductions, the quantized gathers) moves its data while the rank
// computes; run() takes a whole task (a quantized reduction with its encoding) to the thread.
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
  // comm: the communicator the thread alone uses from now on (all_reduce, reduce_scatter); null for a
  // thread that runs only start() and run().
  explicit CommThread(std::unique_ptr<Communicator> comm = nullptr);
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  // As Communicator's (f32 sums; the buffers must stay valid until the request is waited on).
  RequestPtr all_reduce(float* data, size_t count);
  RequestPtr reduce_scatter(const float* send, float* recv, size_t count);

  // An operation the thread starts (op, on communicators only the thread uses) and polls to
  // completion, after every operation submitted before it.
  RequestPtr start(std::function<RequestPtr()> op);
  // A task the thread runs to completion in its turn (blocking calls on the thread's communicators).
  RequestPtr run(std::function<void()> task);

  // The times since the last call (collectives still in flight count when they complete).
  OverlapTimes take_times();

 private:
  struct Job;
  class JobRequest;
  void loop();

  std::unique_ptr<Communicator> comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  OverlapTimes times_;
  std::thread thread_;
};

// A Communicator over `inner` whose calls all run on `thread`, in the order they are made: the async
// ones return at once (their request completes when the thread has polled the operation to its end),
// the blocking ones wait for theirs. Bytes and times are recorded by inner (in its CommStats, which
// stats() returns). inner and thread must outlive it, and inner must be used by nothing else while the
// thread may run its operations.
class ThreadedCommunicator : public Communicator {
 public:
  ThreadedCommunicator(CommThread& thread, Communicator& inner);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& name() const override { return inner_.name(); }
  bool intra_node() const override { return inner_.intra_node(); }
  Communicator& inner() { return inner_; }

  using Communicator::all_reduce;
  using Communicator::all_reduce_async;
  using Communicator::reduce_scatter;
  using Communicator::reduce_scatter_async;
  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override;
  RequestPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  RequestPtr reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  RequestPtr all_gather_async(const void* send, void* recv, size_t count, DType dtype) override;
  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  RequestPtr all_to_all_async(const void* send, void* recv, size_t count, DType dtype) override;
  void all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                    const std::vector<size_t>& send_displs, void* recv,
                    const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                    DType dtype) override;
  void send(const void* data, size_t count, DType dtype, int dest, int tag) override;
  void recv(void* data, size_t count, DType dtype, int source, int tag) override;
  RequestPtr send_async(const void* data, size_t count, DType dtype, int dest, int tag) override;
  RequestPtr recv_async(void* data, size_t count, DType dtype, int source, int tag) override;
  void broadcast(void* data, size_t count, DType dtype, int root) override;
  void barrier() override;
  // Not on the thread: a split is collective over inner's group and would need its own thread.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name, bool intra_node) override;
  uint64_t transient_bytes() const override { return inner_.transient_bytes(); }

 private:
  // Records the call in the accounting now and starts op on the thread.
  RequestPtr issue(CommKind kind, size_t count, DType dtype, std::function<RequestPtr()> op,
                   bool counts_bytes = true);

  CommThread& thread_;
  Communicator& inner_;
};

}  // namespace odyssey
