#include "odyssey/parallel/zeropp.h"

#include "odyssey/core/error.h"

namespace odyssey {

void QuantizedGather::start(Communicator& comm, const WireFormat& format, const float* shard, size_t S,
                            RoundingKey key) {
  ODY_CHECK(!active_, "quantized gather: started twice");
  format_ = format;
  S_ = S;
  P_ = size_t(comm.size());
  send_ = WireBlocks(format, S, 1);
  recv_ = WireBlocks(format, S, P_);
  key.offset = size_t(comm.rank()) * S;
  wire_encode(format, shard, S, key, send_.block(0));
  request_ = comm.all_gather_async(send_.data(), recv_.data(), send_.record_bytes(), DType::u8);
  active_ = true;
}

void QuantizedGather::finish(float* out) {
  ODY_CHECK(active_, "quantized gather: finish without start");
  request_->wait();
  request_.reset();
  for (size_t j = 0; j < P_; ++j) wire_decode(format_, recv_.cblock(j), S_, out + j * S_);
  active_ = false;
  // Scratch is per gather in flight; give it back.
  send_ = {}, recv_ = {};
}

size_t quantized_gather_bytes(const WireFormat& format, size_t S, size_t P) {
  return WireBlocks::bytes_for(format, S, 1) + WireBlocks::bytes_for(format, S, P);
}

size_t one_level_reduce_scatter_bytes(const WireFormat& format, size_t S, size_t P) {
  return 2 * WireBlocks::bytes_for(format, S, P);
}

size_t one_level_reduce_scatter(Communicator& comm, const WireFormat& format, const float* send, float* recv,
                                size_t S, RoundingKey key) {
  const size_t P = size_t(comm.size());
  WireBlocks out(format, S, P), in(format, S, P);
  for (size_t t = 0; t < P; ++t) {
    key.offset = t * S;
    wire_encode(format, send + t * S, S, key, out.block(t));
  }
  comm.all_to_all(out.data(), in.data(), out.record_bytes(), DType::u8);
  std::vector<ConstQuantized> parts(P);
  for (size_t j = 0; j < P; ++j) parts[j] = in.cblock(j);
  wire_decode_sum(format, parts, S, recv);
  return out.size_bytes() + in.size_bytes();
}

}  // namespace odyssey
