#include "odyssey/comm/comm_thread.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"

namespace odyssey {

double OverlapTimes::hidden_fraction() const {
  if (comm_seconds <= 0) return 1.0;
  return std::clamp(1.0 - wait_seconds / comm_seconds, 0.0, 1.0);
}

// One collective: how to start it, and its completion (or failure), which the waiting side sees.
struct CommThread::Job {
  std::function<RequestPtr()> start;
  bool done = false;
  std::exception_ptr error;
};

class CommThread::JobRequest : public Request {
 public:
  JobRequest(CommThread& owner, std::shared_ptr<Job> job) : owner_(owner), job_(std::move(job)) {}
  ~JobRequest() override { wait(); }
  void wait() override {
    if (!job_) return;
    Timer waited;
    std::unique_lock lock(owner_.mutex_);
    owner_.cv_.wait(lock, [&] { return job_->done; });
    owner_.times_.wait_seconds += waited.seconds();
    const std::exception_ptr error = job_->error;
    job_.reset();
    if (error) std::rethrow_exception(error);
  }
  bool test() override {
    if (!job_) return true;
    std::unique_lock lock(owner_.mutex_);
    if (!job_->done) return false;
    lock.unlock();
    wait();
    return true;
  }

 private:
  CommThread& owner_;
  std::shared_ptr<Job> job_;
};

CommThread::CommThread(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {
  thread_ = std::thread([this] { loop(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // after the queue ran dry: every request was waited on or runs to completion
}

RequestPtr CommThread::start(std::function<RequestPtr()> op) {
  auto job = std::make_shared<Job>();
  job->start = std::move(op);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(job);
  }
  cv_.notify_all();
  return std::make_unique<JobRequest>(*this, std::move(job));
}

RequestPtr CommThread::run(std::function<void()> task) {
  return start([task = std::move(task)]() -> RequestPtr {
    task();
    return std::make_unique<CompletedRequest>();
  });
}

RequestPtr CommThread::all_reduce(float* data, size_t count) {
  ODY_CHECK(comm_, "comm thread: all_reduce on a thread without a communicator");
  return start([=, this] { return comm_->all_reduce_async(data, count, DType::f32); });
}

RequestPtr CommThread::reduce_scatter(const float* send, float* recv, size_t count) {
  ODY_CHECK(comm_, "comm thread: reduce_scatter on a thread without a communicator");
  return start([=, this] { return comm_->reduce_scatter_async(send, recv, count, DType::f32); });
}

OverlapTimes CommThread::take_times() {
  std::lock_guard lock(mutex_);
  const OverlapTimes t = times_;
  times_ = {};
  return t;
}

void CommThread::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = queue_.front();
      queue_.pop_front();
    }
    Timer took;
    std::exception_ptr error;
    try {
      RequestPtr r = job->start();
      // Poll rather than block: a blocking MPI wait spins on a core the compute needs. A few
      // microseconds of sleep between polls costs at most that much latency per collective.
      while (!r->test()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      times_.comm_seconds += took.seconds();
      job->done = true;
      job->error = error;
    }
    cv_.notify_all();
  }
}

}  // namespace odyssey

namespace odyssey {

ThreadedCommunicator::ThreadedCommunicator(CommThread& thread, Communicator& inner)
    : thread_(thread), inner_(inner) {
  // inner's accounting, not a copy: no ownership (inner outlives this).
  stats_ = std::shared_ptr<CommStats>(std::shared_ptr<CommStats>{}, &inner.stats());
}

RequestPtr ThreadedCommunicator::issue(CommKind kind, size_t count, DType dtype,
                                       std::function<RequestPtr()> op, bool counts_bytes) {
  // Accounted here, at the call, on the caller's thread; the thread runs it muted. Counted when the
  // thread got to it instead, its bytes could fall outside the caller's window (ZeRO's per micro-step
  // traffic) depending on the thread's timing.
  const uint64_t bytes = counts_bytes ? call_bus_bytes(kind, count, dtype_size(dtype), size()) : 0;
  stats_->record(name(), kind, intra_node(), bytes, 0.0, count, dtype);
  return thread_.start([op = std::move(op)] {
    CommStats::MutedOnThisThread muted;
    return op();
  });
}

void ThreadedCommunicator::all_reduce(void* data, size_t count, DType dtype, ReduceOp op) {
  all_reduce_async(data, count, dtype, op)->wait();
}

RequestPtr ThreadedCommunicator::all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) {
  return issue(CommKind::all_reduce, count, dtype,
               [=, this] { return inner_.all_reduce_async(data, count, dtype, op); });
}

void ThreadedCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                          ReduceOp op) {
  reduce_scatter_async(send, recv, count, dtype, op)->wait();
}

RequestPtr ThreadedCommunicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                      ReduceOp op) {
  return issue(CommKind::reduce_scatter, count, dtype,
               [=, this] { return inner_.reduce_scatter_async(send, recv, count, dtype, op); });
}

void ThreadedCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  all_gather_async(send, recv, count, dtype)->wait();
}

RequestPtr ThreadedCommunicator::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  return issue(CommKind::all_gather, count, dtype,
               [=, this] { return inner_.all_gather_async(send, recv, count, dtype); });
}

void ThreadedCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  all_to_all_async(send, recv, count, dtype)->wait();
}

RequestPtr ThreadedCommunicator::all_to_all_async(const void* send, void* recv, size_t count, DType dtype) {
  return issue(CommKind::all_to_all, count, dtype,
               [=, this] { return inner_.all_to_all_async(send, recv, count, dtype); });
}

void ThreadedCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                                        const std::vector<size_t>& send_displs, void* recv,
                                        const std::vector<size_t>& recv_counts,
                                        const std::vector<size_t>& recv_displs, DType dtype) {
  thread_
      .run(
          [&] { inner_.all_to_all_v(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype); })
      ->wait();
}

void ThreadedCommunicator::send(const void* data, size_t count, DType dtype, int dest, int tag) {
  send_async(data, count, dtype, dest, tag)->wait();
}

void ThreadedCommunicator::recv(void* data, size_t count, DType dtype, int source, int tag) {
  recv_async(data, count, dtype, source, tag)->wait();
}

RequestPtr ThreadedCommunicator::send_async(const void* data, size_t count, DType dtype, int dest, int tag) {
  return issue(CommKind::send_recv, count, dtype,
               [=, this] { return inner_.send_async(data, count, dtype, dest, tag); });
}

RequestPtr ThreadedCommunicator::recv_async(void* data, size_t count, DType dtype, int source, int tag) {
  // The sender counts the message (as every backend does).
  return issue(
      CommKind::send_recv, count, dtype,
      [=, this] { return inner_.recv_async(data, count, dtype, source, tag); },
      /*counts_bytes=*/false);
}

void ThreadedCommunicator::broadcast(void* data, size_t count, DType dtype, int root) {
  thread_.run([=, this] { inner_.broadcast(data, count, dtype, root); })->wait();
}

void ThreadedCommunicator::barrier() {
  thread_.run([this] { inner_.barrier(); })->wait();
}

std::unique_ptr<Communicator> ThreadedCommunicator::split(int, int, const std::string& name, bool) {
  fail("comm thread: communicator {} runs on a communication thread and cannot be split (into {})",
       this->name(), name);
}

}  // namespace odyssey
