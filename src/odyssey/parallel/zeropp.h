// ZeRO++ (Wang et al., 2023; spec communication-quantization.md §2) collectives on flat shards, and the
// one-level quantized reduce-scatter baselines.
//
// qwZ: a shard is encoded block-wise (int8 or int4 groups), the encodings and scales all-gathered and
// decoded by every rank, the owner included, so all ranks use the same weights. Used by ZeRO-3 for
// its forward and backward unit gathers, and by ZeRO-1/2 as the "direct int4 weights" baseline (the
// master weights stay in fp32; only the replicated model copy is quantized).
//
// hpZ: after a unit's forward gather each rank keeps a secondary shard, 1/D of the unit (D ranks per
// node), so the backward gather runs inside the node only.
//
// The one-level quantized reduce-scatter: every destination shard encoded, one all-to-all over all
// ranks, the received encodings summed in fp32 (the intra-only fallback of SDP4Bit §1.4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/parallel/wire_format.h"

namespace odyssey {

// A quantized all-gather that can be left in flight: start() encodes and launches, finish() waits and
// decodes every rank's block into out (comm.size() · S floats).
class QuantizedGather {
 public:
  void start(Communicator& comm, const WireFormat& format, const float* shard, size_t S, RoundingKey key);
  void finish(float* out);
  bool active() const { return active_; }
  uint64_t scratch_bytes() const { return send_.size_bytes() + recv_.size_bytes(); }

 private:
  WireFormat format_;
  size_t S_ = 0, P_ = 0;
  bool active_ = false;
  WireBlocks send_, recv_;
  RequestPtr request_;
};

// What a quantized all-gather of S floats from each of P ranks holds while in flight: its encoded block
// and the P received (QuantizedGather::scratch_bytes; qwd_all_gather's too, sdp4bit.h).
size_t quantized_gather_bytes(const WireFormat& format, size_t S, size_t P);

// send: comm.size() · S; recv: S, this rank's shard summed over all ranks. Returns the bytes of wire
// blocks it held (one_level_reduce_scatter_bytes).
size_t one_level_reduce_scatter(Communicator& comm, const WireFormat& format, const float* send, float* recv,
                                size_t S, RoundingKey key);
// The encoded blocks sent and received: P each.
size_t one_level_reduce_scatter_bytes(const WireFormat& format, size_t S, size_t P);

}  // namespace odyssey
