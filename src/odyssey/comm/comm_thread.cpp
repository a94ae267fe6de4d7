#include "odyssey/comm/comm_thread.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "odyssey/core/timer.h"

namespace odyssey {

double OverlapTimes::hidden_fraction() const {
  if (comm_seconds <= 0) return 1.0;
  return std::clamp(1.0 - wait_seconds / comm_seconds, 0.0, 1.0);
}

// One collective: how to start it, and its completion (or failure), which the waiting side sees.
struct CommThread::Job {
  std::function<RequestPtr(Communicator&)> start;
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
  thread_ = std::thread([this] { run(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // after the queue ran dry: every request was waited on or runs to completion
}

RequestPtr CommThread::submit(std::function<RequestPtr(Communicator&)> start) {
  auto job = std::make_shared<Job>();
  job->start = std::move(start);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(job);
  }
  cv_.notify_all();
  return std::make_unique<JobRequest>(*this, std::move(job));
}

RequestPtr CommThread::all_reduce(float* data, size_t count) {
  return submit([=](Communicator& c) { return c.all_reduce_async(data, count, DType::f32); });
}

RequestPtr CommThread::reduce_scatter(const float* send, float* recv, size_t count) {
  return submit([=](Communicator& c) { return c.reduce_scatter_async(send, recv, count, DType::f32); });
}

OverlapTimes CommThread::take_times() {
  std::lock_guard lock(mutex_);
  const OverlapTimes t = times_;
  times_ = {};
  return t;
}

void CommThread::run() {
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
      RequestPtr r = job->start(*comm_);
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
