#include "odyssey/parallel/zeropp.h"

#include "odyssey/core/error.h"

namespace odyssey {

void QuantizedGather::start(Communicator& comm, const WireFormat& format, const float* shard, size_t S,
                            RoundingKey key) {
  ODY_CHECK(!active_, "quantized gather: started twice");
  format_ = format;
  S_ = S;
  P_ = size_t(comm.size());
  const size_t bytes = format.bytes(S), groups = format.groups(S);
  send_.resize(bytes);
  recv_.resize(bytes * P_);
  send_scales_.resize(groups);
  recv_scales_.resize(groups * P_);
  key.offset = size_t(comm.rank()) * S;
  wire_encode(format, shard, S, key, {send_.data(), send_scales_.data()});
  values_ = comm.all_gather_async(send_.data(), recv_.data(), bytes, DType::u8);
  if (groups) scales_ = comm.all_gather_async(send_scales_.data(), recv_scales_.data(), groups, DType::f32);
  active_ = true;
}

void QuantizedGather::finish(float* out) {
  ODY_CHECK(active_, "quantized gather: finish without start");
  values_->wait();
  if (scales_) scales_->wait();
  values_.reset();
  scales_.reset();
  const size_t bytes = format_.bytes(S_), groups = format_.groups(S_);
  for (size_t j = 0; j < P_; ++j)
    wire_decode(format_, {recv_.data() + j * bytes, recv_scales_.data() + j * groups}, S_, out + j * S_);
  active_ = false;
  // Scratch is per gather in flight; give it back.
  send_ = {}, recv_ = {};
  send_scales_ = {}, recv_scales_ = {};
}

void one_level_reduce_scatter(Communicator& comm, const WireFormat& format, const float* send, float* recv,
                              size_t S, RoundingKey key) {
  const size_t P = size_t(comm.size()), bytes = format.bytes(S), groups = format.groups(S);
  std::vector<uint8_t> out(bytes * P), in(bytes * P);
  std::vector<float> out_scales(groups * P), in_scales(groups * P);
  for (size_t t = 0; t < P; ++t) {
    key.offset = t * S;
    wire_encode(format, send + t * S, S, key, {out.data() + t * bytes, out_scales.data() + t * groups});
  }
  comm.all_to_all(out.data(), in.data(), bytes, DType::u8);
  if (groups) comm.all_to_all(out_scales.data(), in_scales.data(), groups, DType::f32);
  std::vector<ConstQuantized> parts(P);
  for (size_t j = 0; j < P; ++j) parts[j] = {in.data() + j * bytes, in_scales.data() + j * groups};
  wire_decode_sum(format, parts, S, recv);
}

}  // namespace odyssey
