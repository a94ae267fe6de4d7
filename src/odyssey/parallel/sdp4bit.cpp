#include "odyssey/parallel/sdp4bit.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

// An all-to-all of encoded blocks (values and scales in one message), or none yet.
struct Exchange {
  RequestPtr request;
  void wait() {
    if (request) request->wait();
  }
  void test() {
    if (request) request->test();
  }
};

// Block i of every rank to rank i.
Exchange exchange_async(Communicator& comm, const WireBlocks& send, WireBlocks& recv,
                        size_t blocks_per_rank) {
  return {comm.all_to_all_async(send.data(), recv.data(), blocks_per_rank * send.record_bytes(), DType::u8)};
}

}  // namespace

size_t qwd_all_gather(Communicator& dp, const WireFormat& format, const float* master, float* model, size_t S,
                      RoundingKey key) {
  const size_t P = size_t(dp.size()), r = size_t(dp.rank());
  WireBlocks mine(format, S, 1), all(format, S, P);
  key.offset = r * S;
  wire_encode_diff(format, master, model + r * S, S, key, mine.block(0));
  dp.all_gather(mine.data(), all.data(), mine.record_bytes(), DType::u8);
  // The owner adds its own decoded difference too: never model = master.
  for (size_t j = 0; j < P; ++j) wire_decode_add(format, all.cblock(j), S, model + j * S);
  return mine.size_bytes() + all.size_bytes();
}

size_t two_level_slice_align(const WireFormat& intra_format, const WireFormat& inter_format) {
  if (intra_format.identity) return 1;
  return std::lcm(intra_format.quant.group, inter_format.quant.group);
}

namespace {

// One pipeline slice: elements [begin, begin + n) of every shard, with its own buffers per step.
struct Slice {
  Slice(const WireFormat& fi, const WireFormat& fo, size_t begin, size_t n, size_t P, size_t N)
      : begin(begin), n(n), a(fi, n, P), b(fi, n, P), c(fo, n, N), e(fo, n, N) {}
  size_t begin, n;
  WireBlocks a, b, c, e;
  Exchange intra_hop, inter_hop;
};

// The slices' [begin, begin + n): boundaries on whole groups of both formats, so every group (and its
// rounding stream, keyed by the element's place in the shard) is the one the unsliced collective would
// form.
std::vector<std::pair<size_t, size_t>> slice_ranges(const WireFormat& intra_format,
                                                    const WireFormat& inter_format, size_t S, size_t slices) {
  const size_t align = two_level_slice_align(intra_format, inter_format);
  const size_t per_slice = (S + slices - 1) / slices;
  const size_t len = std::max(align, (per_slice + align - 1) / align * align);
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t begin = 0; begin < S; begin += len) ranges.push_back({begin, std::min(len, S - begin)});
  return ranges;
}

}  // namespace

size_t two_level_reduce_scatter_bytes(const WireFormat& intra_format, const WireFormat& inter_format,
                                      size_t S, size_t D, size_t N, size_t slices) {
  size_t bytes = 0;
  for (const auto& [begin, n] : slice_ranges(intra_format, inter_format, S, slices))
    bytes +=
        2 * WireBlocks::bytes_for(intra_format, n, D * N) + 2 * WireBlocks::bytes_for(inter_format, n, N);
  return bytes;
}

size_t two_level_reduce_scatter(Communicator& intra, Communicator& inter, const WireFormat& intra_format,
                                const WireFormat& inter_format, const float* send, float* recv, size_t S,
                                RoundingKey key, size_t slices) {
  const size_t D = size_t(intra.size()), N = size_t(inter.size()), P = D * N;
  ODY_CHECK(intra_format.identity == inter_format.identity,
            "two-level reduce-scatter: identity on one hop only");
  ODY_CHECK((key.bucket >> 31) == 0, "two-level reduce-scatter: bucket id {} too large", key.bucket);
  ODY_CHECK(slices >= 1, "two-level reduce-scatter: {} pipeline slices", slices);

  std::vector<std::unique_ptr<Slice>> sl;
  for (const auto& [begin, n] : slice_ranges(intra_format, inter_format, S, slices))
    sl.push_back(std::make_unique<Slice>(intra_format, inter_format, begin, n, P, N));
  const size_t K = sl.size();

  // MPI advances non-blocking collectives only inside MPI calls: poke the ones in flight between
  // pieces of local work.
  auto progress = [&] {
    for (auto& x : sl) {
      x->intra_hop.test();
      x->inter_hop.test();
    }
  };
  RoundingKey second = key;
  second.bucket = key.bucket | (1u << 31);
  std::vector<ConstQuantized> parts;

  // Step A: every destination shard t, encoded into partition (t mod D)·N + t / D. Step B: block l'
  // (N partitions) to local peer l'.
  auto start_intra = [&](Slice& x) {
    for (size_t t = 0; t < P; ++t) {
      key.offset = t * S + x.begin;
      wire_encode(intra_format, send + t * S + x.begin, x.n, key, x.a.block((t % D) * N + t / D));
      progress();
    }
    x.intra_hop = exchange_async(intra, x.a, x.b, N);
  };
  // Step C: per node n', the D peers' encodings of shard n'·D + l, summed and re-encoded. Step D:
  // partial sum n' to node n'.
  auto start_inter = [&](Slice& x) {
    x.intra_hop.wait();
    parts.resize(D);
    for (size_t n = 0; n < N; ++n) {
      for (size_t d = 0; d < D; ++d) parts[d] = x.b.cblock(d * N + n);
      second.offset = n * S + x.begin;
      wire_decode_sum_encode(intra_format, parts, x.n, inter_format, second, x.c.block(n));
      progress();
    }
    x.inter_hop = exchange_async(inter, x.c, x.e, 1);
  };
  // Step E: sum the nodes' partial sums of my shard.
  auto finish = [&](Slice& x) {
    x.inter_hop.wait();
    parts.resize(N);
    for (size_t n = 0; n < N; ++n) parts[n] = x.e.cblock(n);
    wire_decode_sum(inter_format, parts, x.n, recv + x.begin);
  };

  // Software pipeline: while slice k is encoded and crosses the node, slice k-1 crosses between nodes
  // (the paper's --gradient-alltoall-pipeline, with MPI_Ialltoall in place of CUDA streams).
  for (size_t k = 0; k < K + 2; ++k) {
    if (k < K) start_intra(*sl[k]);
    if (k >= 2) finish(*sl[k - 2]);
    if (k >= 1 && k - 1 < K) start_inter(*sl[k - 1]);
  }
  size_t bytes = 0;
  for (const auto& x : sl)
    bytes += x->a.size_bytes() + x->b.size_bytes() + x->c.size_bytes() + x->e.size_bytes();
  return bytes;
}

}  // namespace odyssey
