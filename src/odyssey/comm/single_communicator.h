// The single-rank Communicator: collectives are copies or no-ops and move no bytes (the stats count
// calls with 0 bytes), so a one-process run goes through the same code paths as a parallel one.
// Send/recv to self work through a mailbox matched by tag, in order, like MPI.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"

namespace odyssey {

class SingleCommunicator : public Communicator {
 public:
  explicit SingleCommunicator(std::string name = "world", bool intra_node = true);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  bool intra_node() const override { return intra_node_; }

  using Communicator::all_reduce;  // the sum overloads
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
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name, bool intra_node) override;

  // Mailbox of messages sent to self and receives posted before their send; shared with requests.
  struct Mailbox;

 private:
  std::string name_;
  bool intra_node_;
  std::shared_ptr<Mailbox> mailbox_;
};

}  // namespace odyssey
