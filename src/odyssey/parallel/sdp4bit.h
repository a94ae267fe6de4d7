// SDP4Bit (Jia et al., NeurIPS 2024; spec communication-quantization.md §1) on flat shards.
//
// qWD (§1.3): after the optimizer step each rank encodes the difference between its new master shard
// and the current model weights of that shard, the encodings are all-gathered, and every rank — the
// owner too — adds every decoded difference to its model weights. All ranks apply the same bits, so
// replicas stay bitwise identical, and the model is off the master by one step's error only.
//
// Two-level reduce-scatter (§1.4, TLq / TLq-HS; with int4/int4 and rounding to nearest it is ZeRO++
// qgZ): P = N nodes × D ranks, rank r = n·D + l. Each rank encodes every destination shard t with the
// intra format into partition (t mod D)·N + t / D, so the D·N partitions form D blocks, one per local
// peer, each holding the N shards of the ranks with that peer's local index. An intra-node all-to-all
// delivers them; each rank sums, per node n', the D encodings of shard n'·D + l in fp32 and re-encodes
// the sum with the inter format; an all-to-all among the ranks with local index l (one per node)
// delivers the node partial sums of its own shard, which it sums. With Hadamard formats the values
// stay in the H32 domain until the last sum, which is transformed back once.
//
// Pipelined (§1.4, --gradient-alltoall-pipeline): the shard is cut into `slices` pieces on whole
// groups of both formats, each with its own buffers and non-blocking all-to-alls; the intra-node hop
// of slice k runs while slice k-1 crosses between nodes. Slicing changes no group and no rounding
// draw, so the result is bitwise that of slices = 1.
#pragma once

#include <cstddef>

#include "odyssey/comm/communicator.h"
#include "odyssey/parallel/wire_format.h"

namespace odyssey {

// model: the P·S model weights of one segment (this rank's shard at rank·S), updated in place;
// master: this rank's S master weights.
// Returns the bytes of wire blocks it held (quantized_gather_bytes(format, S, P), zeropp.h).
size_t qwd_all_gather(Communicator& dp, const WireFormat& format, const float* master, float* model, size_t S,
                      RoundingKey key);

// send: P·S gradients (P = intra.size() · inter.size(), shards in dp rank order); recv: S, the sum of
// this rank's shard over all ranks. intra: this node's ranks by local index; inter: the ranks with this
// local index, by node. key.bucket must leave bit 31 free (it tags the second hop's stream).
// slices >= 1; fewer are used when S holds fewer whole groups. Returns the bytes of wire blocks it held
// (two_level_reduce_scatter_bytes).
size_t two_level_reduce_scatter(Communicator& intra, Communicator& inter, const WireFormat& intra_format,
                                const WireFormat& inter_format, const float* send, float* recv, size_t S,
                                RoundingKey key, size_t slices = 1);
// Every slice's four block sets, held for the whole call: D N intra-format blocks sent and as many
// received, N inter-format blocks sent and as many received.
size_t two_level_reduce_scatter_bytes(const WireFormat& intra_format, const WireFormat& inter_format,
                                      size_t S, size_t D, size_t N, size_t slices = 1);
// Slice boundaries fall on multiples of this: the least common multiple of the two group sizes.
size_t two_level_slice_align(const WireFormat& intra_format, const WireFormat& inter_format);

}  // namespace odyssey
