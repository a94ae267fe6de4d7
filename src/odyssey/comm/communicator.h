// The Communicator: the collectives every parallel feature is written against. One implementation
// runs over MPI (mpi_communicator.h), one is the single-rank identity (single_communicator.h); a
// GPU backend (NCCL) will be a third. Nothing above comm/ calls MPI directly.
//
// Every call is accounted (CommStats): bytes counted per rank as nccl-tests counts bus bytes —
// all-reduce 2(P-1)/P of the buffer, all-gather / reduce-scatter / all-to-all (P-1)/P of the full
// buffer, point-to-point the message — and wall time, per collective kind and per level (a group
// whose ranks are all on one node is intra-node, otherwise inter-node).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "odyssey/comm/comm_stats.h"
#include "odyssey/core/tensor_view.h"

namespace odyssey {

// DType, dtype_size: core/tensor_view.h (bf16 moves as 2-byte elements; no reduction sums it).

// How all_reduce and reduce_scatter combine the ranks' values, elementwise (MPI_SUM, MPI_MAX,
// MPI_MIN). Sum is the default; the bytes accounted do not depend on the operator.
enum class ReduceOp { sum, max, min };
const char* reduce_op_name(ReduceOp op);

// A non-blocking operation in flight. wait() completes it (and records its time); test() makes
// progress and returns true once complete. Destroying an incomplete request waits for it.
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};
using RequestPtr = std::unique_ptr<Request>;

// The request of work done at the call (one rank's collectives, a task run to its end): waiting
// returns at once.
class CompletedRequest : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A name for logs and stats ("world", "dp", "sp_ulysses", ...) and whether all ranks share a node.
  virtual const std::string& name() const = 0;
  virtual bool intra_node() const = 0;

  // In place, reduced with op over all ranks. count elements of dtype at data.
  virtual void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  virtual RequestPtr all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  void all_reduce(void* data, size_t count, DType dtype) { all_reduce(data, count, dtype, ReduceOp::sum); }
  RequestPtr all_reduce_async(void* data, size_t count, DType dtype) {
    return all_reduce_async(data, count, dtype, ReduceOp::sum);
  }

  // send holds size() * count elements; recv (count) gets block rank() reduced with op over all ranks.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
  virtual RequestPtr reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                          ReduceOp op) = 0;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) {
    reduce_scatter(send, recv, count, dtype, ReduceOp::sum);
  }
  RequestPtr reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype) {
    return reduce_scatter_async(send, recv, count, dtype, ReduceOp::sum);
  }

  // send holds count elements; recv (size() * count) gets every rank's block in rank order.
  // send may equal recv + rank() * count (in place).
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual RequestPtr all_gather_async(const void* send, void* recv, size_t count, DType dtype) = 0;

  // Block j of send (count elements) goes to rank j; block i of recv comes from rank i.
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Several may be in flight on one communicator if every rank starts them in the same order.
  virtual RequestPtr all_to_all_async(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Variable sizes and displacements, in elements.
  virtual void all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                            const std::vector<size_t>& send_displs, void* recv,
                            const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
                            DType dtype) = 0;

  // Point-to-point. Tags come from comm/p2p_tags.h, so that two features never share one.
  virtual void send(const void* data, size_t count, DType dtype, int dest, int tag) = 0;
  virtual void recv(void* data, size_t count, DType dtype, int source, int tag) = 0;
  virtual RequestPtr send_async(const void* data, size_t count, DType dtype, int dest, int tag) = 0;
  virtual RequestPtr recv_async(void* data, size_t count, DType dtype, int source, int tag) = 0;

  // Broadcast from root, in place.
  virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
  virtual void barrier() = 0;

  // A new communicator over the ranks with the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name,
                                              bool intra_node) = 0;

  // Bytes a reduction on this communicator may hold beyond its callers' buffers while it runs (the
  // MPI library's temporaries and packed pieces): the memory accounting adds them once per process.
  virtual uint64_t transient_bytes() const { return 0; }

  CommStats& stats() { return *stats_; }
  const CommStats& stats() const { return *stats_; }

 protected:
  // Shared by a communicator and the ones split from it, so one report covers a rank's traffic.
  std::shared_ptr<CommStats> stats_ = std::make_shared<CommStats>();
};

}  // namespace odyssey
