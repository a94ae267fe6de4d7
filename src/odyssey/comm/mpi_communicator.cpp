#include "odyssey/comm/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"

namespace odyssey {

namespace {

std::atomic<size_t> g_max_chunk{static_cast<size_t>(INT_MAX)};
std::atomic<size_t> g_max_reduction_bytes{size_t(32) << 20};
constexpr int kChunkTag = MpiCommunicator::kMaxUserTag + 1;

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::bf16:
      return MPI_UINT16_T;  // moved as bits; reductions refuse it (reduction_type)
  }
  fail("unknown dtype {}", static_cast<int>(t));
}

// The type a reduction combines: bf16's bits would be summed as integers.
MPI_Datatype reduction_type(DType t) {
  ODY_CHECK(t != DType::bf16, "communicator: a reduction of bf16 elements (sum them as f32)");
  return mpi_type(t);
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  fail("unknown reduction operator {}", static_cast<int>(op));
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{} failed: {}", what, std::string(text, len));
}

char* at(void* p, size_t elements, size_t es) {
  return static_cast<char*>(p) + elements * es;
}
const char* at(const void* p, size_t elements, size_t es) {
  return static_cast<const char*>(p) + elements * es;
}

// Calls fn(offset, n) for consecutive pieces of at most max_chunk() elements (once for count 0).
template <typename Fn>
void for_chunks(size_t count, Fn&& fn) {
  const size_t limit = MpiCommunicator::max_chunk();
  size_t off = 0;
  do {
    const size_t n = std::min(limit, count - off);
    fn(off, static_cast<int>(n));
    off += n;
  } while (off < count);
}

// One logical operation: the MPI requests it was split into, and its accounting. Bytes and the
// call are recorded at the start; the time when it is seen complete.
class MpiRequest : public Request {
 public:
  MpiRequest(std::shared_ptr<CommStats> stats, std::string group, CommKind kind, bool intra_node)
      : stats_(std::move(stats)), group_(std::move(group)), kind_(kind), intra_node_(intra_node) {}
  ~MpiRequest() override {
    if (!done_) wait();
  }
  void wait() override {
    if (done_) return;
    check_mpi(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    finish();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE),
              "MPI_Testall");
    if (flag) finish();
    return done_;
  }
  MPI_Request* add() { return &reqs_.emplace_back(MPI_REQUEST_NULL); }

 private:
  void finish() {
    done_ = true;
    stats_->add_time(group_, kind_, intra_node_, timer_.seconds());
  }
  std::shared_ptr<CommStats> stats_;
  std::string group_;
  CommKind kind_;
  bool intra_node_;
  Timer timer_;
  bool done_ = false;
  std::vector<MPI_Request> reqs_;
};

}  // namespace

void MpiCommunicator::set_max_chunk(size_t elements) {
  ODY_CHECK(elements >= 1 && elements <= static_cast<size_t>(INT_MAX), "max chunk must be in 1..{}, got {}",
            INT_MAX, elements);
  g_max_chunk = elements;
}

size_t MpiCommunicator::max_chunk() {
  return g_max_chunk;
}

void MpiCommunicator::set_max_reduction_bytes(size_t bytes) {
  ODY_CHECK(bytes >= 1, "max reduction piece must be at least 1 byte");
  g_max_reduction_bytes = bytes;
}

size_t MpiCommunicator::max_reduction_bytes() {
  return g_max_reduction_bytes;
}

uint64_t MpiCommunicator::transient_bytes() const {
  // The binomial root holds twice a piece (measured), and reduce_scatter's packed piece.
  return size_ > 1 ? 3 * uint64_t(max_reduction_bytes()) : 0;
}

size_t MpiCommunicator::reduction_piece(size_t element_bytes) {
  return std::min(max_chunk(), std::max<size_t>(1, max_reduction_bytes() / element_bytes));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool intra_node, bool owned)
    : comm_(comm), name_(std::move(name)), intra_node_(intra_node), owned_(owned) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

RequestPtr MpiCommunicator::all_reduce_async(void* data, size_t count, DType dtype, ReduceOp op) {
  const size_t es = dtype_size(dtype);
  stats_->record(name_, CommKind::all_reduce, intra_node_,
                 call_bus_bytes(CommKind::all_reduce, count, es, size_), 0.0, count, dtype);
  auto req = std::make_unique<MpiRequest>(stats_, name_, CommKind::all_reduce, intra_node_);
  const size_t piece = reduction_piece(es);
  for (size_t off = 0; off == 0 || off < count; off += piece) {
    const int n = static_cast<int>(std::min(piece, count - off));
    MPI_Request* r = req->add();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, at(data, off, es), n, reduction_type(dtype), mpi_op(op), comm_, r),
              "MPI_Iallreduce");
    if (off + n < count) check_mpi(MPI_Wait(r, MPI_STATUS_IGNORE), "MPI_Wait");  // not the last piece
  }
  return req;
}

void MpiCommunicator::all_reduce(void* data, size_t count, DType dtype, ReduceOp op) {
  all_reduce_async(data, count, dtype, op)->wait();
}

RequestPtr MpiCommunicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                 ReduceOp op) {
  const size_t es = dtype_size(dtype);
  const MPI_Datatype type = reduction_type(dtype);
  stats_->record(name_, CommKind::reduce_scatter, intra_node_,
                 call_bus_bytes(CommKind::reduce_scatter, count, es, size_), 0.0, count, dtype);
  auto req = std::make_unique<MpiRequest>(stats_, name_, CommKind::reduce_scatter, intra_node_);
  const size_t piece = std::max<size_t>(1, reduction_piece(es) / size_t(size_));  // elements per block
  if (count <= piece) {
    check_mpi(
        MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count), type, mpi_op(op), comm_, req->add()),
        "MPI_Ireduce_scatter_block");
    return req;
  }
  // Pieces [off, off + n) of every block, packed block after block: [P, n], each completed before the
  // next is packed (a request holding its packed piece while in flight would keep it per bucket).
  std::vector<char> packed(size_t(size_) * piece * es);
  for (size_t off = 0; off < count; off += piece) {
    const size_t n = std::min(piece, count - off);
    for (int j = 0; j < size_; ++j)
      std::memcpy(packed.data() + j * n * es, at(send, j * count + off, es), n * es);
    MPI_Request* r = req->add();
    check_mpi(MPI_Ireduce_scatter_block(packed.data(), at(recv, off, es), static_cast<int>(n), type,
                                        mpi_op(op), comm_, r),
              "MPI_Ireduce_scatter_block");
    check_mpi(MPI_Wait(r, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  return req;
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  reduce_scatter_async(send, recv, count, dtype, op)->wait();
}

RequestPtr MpiCommunicator::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  const size_t es = dtype_size(dtype);
  const MPI_Datatype type = mpi_type(dtype);
  stats_->record(name_, CommKind::all_gather, intra_node_,
                 call_bus_bytes(CommKind::all_gather, count, es, size_), 0.0, count, dtype);
  auto req = std::make_unique<MpiRequest>(stats_, name_, CommKind::all_gather, intra_node_);
  char* mine = at(recv, rank_ * count, es);
  const bool in_place = send == mine;
  if (count <= max_chunk()) {
    check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), type, recv,
                             static_cast<int>(count), type, comm_, req->add()),
              "MPI_Iallgather");
    return req;
  }
  // Large blocks: each owner broadcasts its block in pieces.
  if (!in_place) std::memcpy(mine, send, count * es);
  for_chunks(count, [&](size_t off, int n) {
    for (int j = 0; j < size_; ++j)
      check_mpi(MPI_Ibcast(at(recv, j * count + off, es), n, type, j, comm_, req->add()), "MPI_Ibcast");
  });
  return req;
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  all_gather_async(send, recv, count, dtype)->wait();
}

RequestPtr MpiCommunicator::all_to_all_async(const void* send, void* recv, size_t count, DType dtype) {
  const size_t es = dtype_size(dtype);
  const MPI_Datatype type = mpi_type(dtype);
  stats_->record(name_, CommKind::all_to_all, intra_node_,
                 call_bus_bytes(CommKind::all_to_all, count, es, size_), 0.0, count, dtype);
  auto req = std::make_unique<MpiRequest>(stats_, name_, CommKind::all_to_all, intra_node_);
  if (count <= max_chunk()) {
    check_mpi(MPI_Ialltoall(send, static_cast<int>(count), type, recv, static_cast<int>(count), type, comm_,
                            req->add()),
              "MPI_Ialltoall");
    return req;
  }
  // Large blocks: point-to-point pieces. Messages between two ranks on one communicator and tag do not
  // overtake each other, so operations started in the same order on every rank match piece by piece.
  std::memcpy(at(recv, rank_ * count, es), at(send, rank_ * count, es), count * es);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    for_chunks(count, [&](size_t off, int n) {
      check_mpi(MPI_Irecv(at(recv, j * count + off, es), n, type, j, kChunkTag, comm_, req->add()),
                "MPI_Irecv");
      check_mpi(MPI_Isend(at(send, j * count + off, es), n, type, j, kChunkTag, comm_, req->add()),
                "MPI_Isend");
    });
  }
  return req;
}

void MpiCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  all_to_all_async(send, recv, count, dtype)->wait();
}

void MpiCommunicator::all_to_all_v(const void* send, const std::vector<size_t>& send_counts,
                                   const std::vector<size_t>& send_displs, void* recv,
                                   const std::vector<size_t>& recv_counts,
                                   const std::vector<size_t>& recv_displs, DType dtype) {
  const size_t P = size_;
  ODY_CHECK(send_counts.size() == P && send_displs.size() == P && recv_counts.size() == P &&
                recv_displs.size() == P,
            "all_to_all_v on {}: counts and displacements need one entry per rank ({})", name_, P);
  const size_t es = dtype_size(dtype);
  const MPI_Datatype type = mpi_type(dtype);
  uint64_t sent = 0;
  bool small = true;
  for (size_t j = 0; j < P; ++j) {
    if (j != static_cast<size_t>(rank_)) sent += send_counts[j] * es;
    for (size_t v : {send_counts[j], send_displs[j], recv_counts[j], recv_displs[j]})
      small = small && v <= max_chunk();
  }
  size_t sent_count = 0;  // the trace's count: every element this rank sends, its own block included
  for (size_t c : send_counts) sent_count += c;
  stats_->record(name_, CommKind::all_to_all, intra_node_, size_ > 1 ? sent : 0, 0.0, sent_count, dtype);
  MpiRequest req(stats_, name_, CommKind::all_to_all, intra_node_);
  if (small) {
    auto ints = [](const std::vector<size_t>& v) { return std::vector<int>(v.begin(), v.end()); };
    const auto sc = ints(send_counts), sd = ints(send_displs), rc = ints(recv_counts), rd = ints(recv_displs);
    check_mpi(
        MPI_Ialltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm_, req.add()),
        "MPI_Ialltoallv");
    req.wait();
    return;
  }
  const int me = rank_;
  ODY_CHECK(send_counts[me] == recv_counts[me],
            "all_to_all_v on {}: rank {} sends {} elements to itself but expects {}", name_, me,
            send_counts[me], recv_counts[me]);
  std::memmove(at(recv, recv_displs[me], es), at(send, send_displs[me], es), send_counts[me] * es);
  for (int j = 0; j < size_; ++j) {
    if (j == me) continue;
    // Pieces of one message match in order (MPI's non-overtaking rule), so chunk boundaries agree
    // as long as both sides use the same max_chunk().
    if (recv_counts[j])
      for_chunks(recv_counts[j], [&](size_t off, int n) {
        check_mpi(MPI_Irecv(at(recv, recv_displs[j] + off, es), n, type, j, kChunkTag, comm_, req.add()),
                  "MPI_Irecv");
      });
    if (send_counts[j])
      for_chunks(send_counts[j], [&](size_t off, int n) {
        check_mpi(MPI_Isend(at(send, send_displs[j] + off, es), n, type, j, kChunkTag, comm_, req.add()),
                  "MPI_Isend");
      });
  }
  req.wait();
}

RequestPtr MpiCommunicator::send_async(const void* data, size_t count, DType dtype, int dest, int tag) {
  ODY_CHECK(dest >= 0 && dest < size_, "send on {}: destination rank {} outside 0..{}", name_, dest,
            size_ - 1);
  ODY_CHECK(tag >= 0 && tag <= kMaxUserTag, "send on {}: tag {} outside 0..{}", name_, tag, kMaxUserTag);
  const size_t es = dtype_size(dtype);
  stats_->record(name_, CommKind::send_recv, intra_node_,
                 call_bus_bytes(CommKind::send_recv, count, es, size_), 0.0, count, dtype);
  auto req = std::make_unique<MpiRequest>(stats_, name_, CommKind::send_recv, intra_node_);
  for_chunks(count, [&](size_t off, int n) {
    check_mpi(MPI_Isend(at(data, off, es), n, mpi_type(dtype), dest, tag, comm_, req->add()), "MPI_Isend");
  });
  return req;
}

RequestPtr MpiCommunicator::recv_async(void* data, size_t count, DType dtype, int source, int tag) {
  ODY_CHECK(source >= 0 && source < size_, "recv on {}: source rank {} outside 0..{}", name_, source,
            size_ - 1);
  ODY_CHECK(tag >= 0 && tag <= kMaxUserTag, "recv on {}: tag {} outside 0..{}", name_, tag, kMaxUserTag);
  const size_t es = dtype_size(dtype);
  stats_->record(name_, CommKind::send_recv, intra_node_, 0, 0.0, count,
                 dtype);  // the sender counts the message
  auto req = std::make_unique<MpiRequest>(stats_, name_, CommKind::send_recv, intra_node_);
  for_chunks(count, [&](size_t off, int n) {
    check_mpi(MPI_Irecv(at(data, off, es), n, mpi_type(dtype), source, tag, comm_, req->add()), "MPI_Irecv");
  });
  return req;
}

void MpiCommunicator::send(const void* data, size_t count, DType dtype, int dest, int tag) {
  send_async(data, count, dtype, dest, tag)->wait();
}

void MpiCommunicator::recv(void* data, size_t count, DType dtype, int source, int tag) {
  recv_async(data, count, dtype, source, tag)->wait();
}

void MpiCommunicator::broadcast(void* data, size_t count, DType dtype, int root) {
  ODY_CHECK(root >= 0 && root < size_, "broadcast on {}: root rank {} outside 0..{}", name_, root, size_ - 1);
  const size_t es = dtype_size(dtype);
  stats_->record(name_, CommKind::broadcast, intra_node_,
                 call_bus_bytes(CommKind::broadcast, count, es, size_), 0.0, count, dtype);
  MpiRequest req(stats_, name_, CommKind::broadcast, intra_node_);
  for_chunks(count, [&](size_t off, int n) {
    check_mpi(MPI_Ibcast(at(data, off, es), n, mpi_type(dtype), root, comm_, req.add()), "MPI_Ibcast");
  });
  req.wait();
}

void MpiCommunicator::barrier() {
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name,
                                                     bool intra_node) {
  MPI_Comm child = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "MPI_Comm_split");
  if (child == MPI_COMM_NULL) return nullptr;
  auto result = std::make_unique<MpiCommunicator>(child, name, intra_node, true);
  result->stats_ = stats_;
  return result;
}

}  // namespace odyssey
