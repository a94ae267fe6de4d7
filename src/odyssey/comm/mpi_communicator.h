// The Communicator over MPI. Non-blocking collectives return requests whose test() calls MPI_Test,
// so a caller polling between compute pieces makes progress; wait() records the elapsed time.
//
// Counts are size_t. An operation whose counts (or all_to_all_v displacements) exceed the MPI int
// limit is split into chunks: broadcast and send/recv into consecutive pieces, all-gather into
// per-block broadcasts, all-to-all(v) into point-to-point pieces. The bytes accounted are the same
// whatever the chunking.
//
// Reductions larger than max_reduction_bytes() per rank (32 MiB) run in pieces of that size. Open
// MPI 4.1 reduces to a binomial root: MPI_Ireduce_scatter_block keeps twice the whole send buffer on
// rank 0 (and once on the tree's inner ranks), MPI_Iallreduce once on the inner ranks (measured at 4
// ranks); for a ZeRO bucket of the embeddings that is 300 MB on rank 0 alone. A piece is the same call
// over a slice, so every element is reduced by the same algorithm in the same order: bitwise the
// one-call result (mpitest_communicator), the temporaries bounded by transient_bytes(). All-reduce
// pieces but the last, and every reduce-scatter piece (packed [P, n] in a buffer reused piece after
// piece), complete before the call returns: such a reduction overlaps no compute (or only its last
// piece). Smaller reductions are one non-blocking call, as before.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/comm/p2p_tags.h"

namespace odyssey {

class MpiCommunicator : public Communicator {
 public:
  // Wraps comm; frees it on destruction when owned (never after MPI_Finalize).
  MpiCommunicator(MPI_Comm comm, std::string name, bool intra_node, bool owned);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm handle() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
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
  // Tags are 0..kMaxUserTag (comm/p2p_tags.h); the tag above is reserved for chunked all-to-all pieces.
  void send(const void* data, size_t count, DType dtype, int dest, int tag) override;
  void recv(void* data, size_t count, DType dtype, int source, int tag) override;
  RequestPtr send_async(const void* data, size_t count, DType dtype, int dest, int tag) override;
  RequestPtr recv_async(void* data, size_t count, DType dtype, int source, int tag) override;
  void broadcast(void* data, size_t count, DType dtype, int root) override;
  void barrier() override;
  // A negative color (MPI_UNDEFINED) joins no group and returns nullptr.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name, bool intra_node) override;

  static constexpr int kMaxUserTag = kMaxP2pTag;

  // Largest element count passed to one MPI call (default INT_MAX). Tests lower it to exercise the
  // chunked paths on small buffers; every rank must use the same value.
  static void set_max_chunk(size_t elements);
  static size_t max_chunk();
  // Largest per-rank buffer of one reduction piece (above); tests lower it. Same on every rank.
  static void set_max_reduction_bytes(size_t bytes);
  static size_t max_reduction_bytes();
  uint64_t transient_bytes() const override;

 private:
  // Elements of element_bytes each in one reduction piece.
  static size_t reduction_piece(size_t element_bytes);
  MPI_Comm comm_;
  std::string name_;
  bool intra_node_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace odyssey
