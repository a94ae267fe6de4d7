#include "odyssey/parallel/sdp4bit.h"

#include <vector>

#include "odyssey/core/error.h"

namespace odyssey {

namespace {

// Encoded blocks of one format, back to back: values in `data`, scales in `scales`.
struct WireBlocks {
  WireBlocks(const WireFormat& f, size_t n, size_t count)
      : bytes(f.bytes(n)), groups(f.groups(n)), data(bytes * count), scales(groups * count) {}
  Quantized block(size_t i) { return {data.data() + i * bytes, scales.data() + i * groups}; }
  ConstQuantized cblock(size_t i) const { return {data.data() + i * bytes, scales.data() + i * groups}; }

  size_t bytes, groups;
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

// Block i of every rank to rank i: values and (when the format has them) scales.
void exchange(Communicator& comm, const WireBlocks& send, WireBlocks& recv, size_t blocks_per_rank) {
  comm.all_to_all(send.data.data(), recv.data.data(), blocks_per_rank * send.bytes, DType::u8);
  if (send.groups)
    comm.all_to_all(send.scales.data(), recv.scales.data(), blocks_per_rank * send.groups, DType::f32);
}

}  // namespace

void qwd_all_gather(Communicator& dp, const WireFormat& format, const float* master, float* model, size_t S,
                    RoundingKey key) {
  const size_t P = size_t(dp.size()), r = size_t(dp.rank());
  WireBlocks mine(format, S, 1), all(format, S, P);
  key.offset = r * S;
  wire_encode_diff(format, master, model + r * S, S, key, mine.block(0));
  dp.all_gather(mine.data.data(), all.data.data(), mine.bytes, DType::u8);
  if (mine.groups) dp.all_gather(mine.scales.data(), all.scales.data(), mine.groups, DType::f32);
  // The owner adds its own decoded difference too: never model = master.
  for (size_t j = 0; j < P; ++j) wire_decode_add(format, all.cblock(j), S, model + j * S);
}

void two_level_reduce_scatter(Communicator& intra, Communicator& inter, const WireFormat& intra_format,
                              const WireFormat& inter_format, const float* send, float* recv, size_t S,
                              RoundingKey key) {
  const size_t D = size_t(intra.size()), N = size_t(inter.size()), P = D * N;
  ODY_CHECK(intra_format.identity == inter_format.identity,
            "two-level reduce-scatter: identity on one hop only");
  ODY_CHECK((key.bucket >> 31) == 0, "two-level reduce-scatter: bucket id {} too large", key.bucket);

  // Step A: every destination shard t, encoded into partition (t mod D)·N + t / D.
  WireBlocks a(intra_format, S, P);
  for (size_t t = 0; t < P; ++t) {
    key.offset = t * S;
    wire_encode(intra_format, send + t * S, S, key, a.block((t % D) * N + t / D));
  }
  // Step B: block l' (N partitions) to local peer l'.
  WireBlocks b(intra_format, S, P);
  exchange(intra, a, b, N);

  // Step C: per node n', the D peers' encodings of shard n'·D + l, summed and re-encoded.
  WireBlocks c(inter_format, S, N);
  RoundingKey second = key;
  second.bucket = key.bucket | (1u << 31);
  std::vector<ConstQuantized> parts(D);
  for (size_t n = 0; n < N; ++n) {
    for (size_t d = 0; d < D; ++d) parts[d] = b.cblock(d * N + n);
    second.offset = n * S;
    wire_decode_sum_encode(intra_format, parts, S, inter_format, second, c.block(n));
  }
  // Step D: partial sum n' to node n'. Step E: sum the nodes' partial sums of my shard.
  WireBlocks e(inter_format, S, N);
  exchange(inter, c, e, 1);
  parts.resize(N);
  for (size_t n = 0; n < N; ++n) parts[n] = e.cblock(n);
  wire_decode_sum(inter_format, parts, S, recv);
}

}  // namespace odyssey
