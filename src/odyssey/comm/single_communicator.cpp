#include "odyssey/comm/single_communicator.h"

#include <cstring>

#include "odyssey/core/error.h"

namespace odyssey {

struct SingleCommunicator::Mailbox {
  struct Message {
    int tag;
    std::vector<char> bytes;
  };
  struct PendingRecv {
    int tag;
    void* data;
    size_t bytes;
    std::shared_ptr<bool> done;
  };
  std::deque<Message> messages;
  std::deque<PendingRecv> pending;

  // Hands a message to the oldest matching posted receive, or queues it.
  void deliver(int tag, const void* data, size_t bytes) {
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (it->tag != tag) continue;
      ODY_CHECK(it->bytes == bytes, "send to self: {} bytes sent, {} expected by the receive (tag {})", bytes,
                it->bytes, tag);
      if (bytes) std::memcpy(it->data, data, bytes);
      *it->done = true;
      pending.erase(it);
      return;
    }
    const char* p = static_cast<const char*>(data);
    messages.push_back({tag, std::vector<char>(p, p + bytes)});
  }

  // Takes the oldest queued message with this tag; false if there is none yet.
  bool take(int tag, void* data, size_t bytes) {
    for (auto it = messages.begin(); it != messages.end(); ++it) {
      if (it->tag != tag) continue;
      ODY_CHECK(it->bytes.size() == bytes, "recv from self: {} bytes expected, {} sent (tag {})", bytes,
                it->bytes.size(), tag);
      if (bytes) std::memcpy(data, it->bytes.data(), bytes);
      messages.erase(it);
      return true;
    }
    return false;
  }
};

namespace {

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

// A receive posted before its send; the send completes it. On one rank waiting cannot help, so an
// unmatched wait is an error rather than a hang.
class SelfRecvRequest : public Request {
 public:
  SelfRecvRequest(std::shared_ptr<SingleCommunicator::Mailbox> mailbox, std::shared_ptr<bool> done)
      : mailbox_(std::move(mailbox)), done_(std::move(done)) {}
  ~SelfRecvRequest() override {
    // Withdraw the receive so a later send cannot write into a buffer the caller gave up.
    if (*done_) return;
    auto& pending = mailbox_->pending;
    for (auto it = pending.begin(); it != pending.end(); ++it)
      if (it->done == done_) {
        pending.erase(it);
        break;
      }
  }
  void wait() override { ODY_CHECK(*done_, "receive from self can never complete: no matching send"); }
  bool test() override { return *done_; }

 private:
  std::shared_ptr<SingleCommunicator::Mailbox> mailbox_;
  std::shared_ptr<bool> done_;
};

void check_peer(int peer, const char* what) {
  ODY_CHECK(peer == 0, "{} rank {} on a communicator of size 1", what, peer);
}

}  // namespace

SingleCommunicator::SingleCommunicator(std::string name, bool intra_node)
    : name_(std::move(name)), intra_node_(intra_node), mailbox_(std::make_shared<Mailbox>()) {}

// One rank: every operator's reduction of a single value is that value.
void SingleCommunicator::all_reduce(void*, size_t count, DType dtype, ReduceOp) {
  stats_->record(name_, CommKind::all_reduce, intra_node_, 0, 0.0, count, dtype);
}

RequestPtr SingleCommunicator::all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) {
  all_reduce(data, count, dtype, op);
  return std::make_unique<CompletedRequest>();
}

void SingleCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp) {
  copy_bytes(recv, send, count * dtype_size(dtype));
  stats_->record(name_, CommKind::reduce_scatter, intra_node_, 0, 0.0, count, dtype);
}

RequestPtr SingleCommunicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                    ReduceOp op) {
  reduce_scatter(send, recv, count, dtype, op);
  return std::make_unique<CompletedRequest>();
}

void SingleCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  copy_bytes(recv, send, count * dtype_size(dtype));
  stats_->record(name_, CommKind::all_gather, intra_node_, 0, 0.0, count, dtype);
}

RequestPtr SingleCommunicator::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  all_gather(send, recv, count, dtype);
  return std::make_unique<CompletedRequest>();
}

void SingleCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  copy_bytes(recv, send, count * dtype_size(dtype));
  stats_->record(name_, CommKind::all_to_all, intra_node_, 0, 0.0, count, dtype);
}

RequestPtr SingleCommunicator::all_to_all_async(const void* send, void* recv, size_t count, DType dtype) {
  all_to_all(send, recv, count, dtype);
  return std::make_unique<CompletedRequest>();
}

void SingleCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                                      const std::vector<size_t>& send_displs, void* recv,
                                      const std::vector<size_t>& recv_counts,
                                      const std::vector<size_t>& recv_displs, DType dtype) {
  ODY_CHECK(send_counts.size() == 1 && send_displs.size() == 1 && recv_counts.size() == 1 &&
                recv_displs.size() == 1,
            "all_to_all_v on {}: counts and displacements need one entry per rank (1)", name_);
  ODY_CHECK(send_counts[0] == recv_counts[0],
            "all_to_all_v on {}: sends {} elements to itself but expects {}", name_, send_counts[0],
            recv_counts[0]);
  const size_t es = dtype_size(dtype);
  copy_bytes(static_cast<char*>(recv) + recv_displs[0] * es,
             static_cast<const char*>(send) + send_displs[0] * es, send_counts[0] * es);
  stats_->record(name_, CommKind::all_to_all, intra_node_, 0, 0.0, send_counts[0], dtype);
}

void SingleCommunicator::send(const void* data, size_t count, DType dtype, int dest, int tag) {
  check_peer(dest, "send to");
  mailbox_->deliver(tag, data, count * dtype_size(dtype));
  stats_->record(name_, CommKind::send_recv, intra_node_, 0, 0.0, count, dtype);
}

void SingleCommunicator::recv(void* data, size_t count, DType dtype, int source, int tag) {
  check_peer(source, "recv from");
  ODY_CHECK(mailbox_->take(tag, data, count * dtype_size(dtype)),
            "recv from self on {} (tag {}) can never complete: no matching send", name_, tag);
  stats_->record(name_, CommKind::send_recv, intra_node_, 0, 0.0, count, dtype);
}

RequestPtr SingleCommunicator::send_async(const void* data, size_t count, DType dtype, int dest, int tag) {
  send(data, count, dtype, dest, tag);
  return std::make_unique<CompletedRequest>();
}

RequestPtr SingleCommunicator::recv_async(void* data, size_t count, DType dtype, int source, int tag) {
  check_peer(source, "recv from");
  const size_t bytes = count * dtype_size(dtype);
  auto done = std::make_shared<bool>(mailbox_->take(tag, data, bytes));
  if (!*done) mailbox_->pending.push_back({tag, data, bytes, done});
  stats_->record(name_, CommKind::send_recv, intra_node_, 0, 0.0, count, dtype);
  return std::make_unique<SelfRecvRequest>(mailbox_, done);
}

void SingleCommunicator::broadcast(void*, size_t count, DType dtype, int root) {
  check_peer(root, "broadcast from");
  stats_->record(name_, CommKind::broadcast, intra_node_, 0, 0.0, count, dtype);
}

std::unique_ptr<Communicator> SingleCommunicator::split(int color, int, const std::string& name,
                                                        bool intra_node) {
  if (color < 0) return nullptr;  // as MPI_UNDEFINED: not a member of any new group
  auto child = std::make_unique<SingleCommunicator>(name, intra_node);
  child->stats_ = stats_;
  return child;
}

}  // namespace odyssey
