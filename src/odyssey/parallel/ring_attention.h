// Ring attention (spec §2.3): each rank of the ring group keeps its queries; key/value blocks travel
// around the ring, one hop per step, and each rank merges its partial results with the exact LSE
// merge (lse_merge.h). P steps, P - 1 transfers forward.
//
//   forward:  K and V of a block travel in ONE message (packed [B, Tl, 2, Hkv, D]); double-buffered:
//             the receive of the next block is posted first, then the send of the current one, then
//             the block is computed while both are in flight (in-flight requests are polled between
//             kernel calls, since MPI on a CPU progresses only inside MPI calls).
//   backward: K, V circulate again; the dK/dV accumulator of each block travels with it in fp32 and
//             returns to its owner after P hops; dQ accumulates locally. Uses the final out and lse.
//
// Token layouts (sequence_shard.h): contiguous (rank r holds [r Tl, (r+1) Tl)) or zigzag (chunks r
// and 2P-1-r of 2P). Every (query chunk, key chunk) pair is classified by global positions: full
// (all keys before all queries), causal diagonal (overlapping ranges), or skipped (all keys after).
// Under zigzag every off-diagonal step is the same amount of work on every rank.
//
// Bytes per rank per layer (fp32, message bytes as the Communicator counts send/recv, h_kv = Hkv D,
// c = Tl tokens per rank, P ring ranks):
//   forward  (P - 1) * B c * 2 h_kv * 4
//   backward (P - 1) * B c * 2 h_kv * 4  (K, V)  +  P * B c * 2 h_kv * 4  (dK, dV, fp32, P hops)
// i.e. ≈ 2 N h_kv forward and 4 N h_kv backward per row of N = P c tokens (spec §3).
#pragma once

#include <vector>

#include "odyssey/comm/communicator.h"
#include "odyssey/core/bf16.h"
#include "odyssey/core/buffer.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/model/attention_op.h"
#include "odyssey/parallel/sequence_shard.h"

namespace odyssey {

struct RingOptions {
  RingLayout layout = RingLayout::zigzag;
  // false: wait for each step's transfers before computing (no overlap; to measure the overlap).
  bool overlap = true;
  // Query rows per kernel call; in-flight transfers are polled between calls.
  int progress_rows = 256;
  // train.precision = bf16: the K|V blocks travel as bf16 (the policy stores k and v in bf16: lossless,
  // half the bytes); the dK|dV partial sums stay fp32 (mixed-precision.md §7, comm.sp_grads = fp32).
  // The blocks' kernel is then the bf16 policy's (attention_forward_bf16; partial outputs merged in fp32).
  bool bf16_wire = false;
};

// Where the time of the calls since reset() went (seconds): block compute (kernel calls and merges)
// and waiting for transfers that were not complete when the compute ran out.
struct RingTimes {
  double compute = 0, wait = 0;
  int steps = 0;
};

// Sizes only (the footprint, train/footprint.h; the op's bytes_for): the ring's scratch after
// forward_heads and backward_heads over Tl tokens of H query / Hkv kv heads on a ring of P ranks that
// computes progress_rows query rows per kernel call; and after the layers' forward and in-place backward
// over T tokens (n_kv_head 0: H), with dq's [B, T, H D]. bf16_wire: with the bf16 K|V blocks sent and
// received.
size_t ring_scratch_bytes(int P, int progress_rows, int B, int Tl, int H, int Hkv, int D, bool bf16_wire);
size_t ring_bytes_for(int P, int progress_rows, int n_kv_head, int B, int T, int H, int D, bool bf16_wire);

class RingAttention : public AttentionOp {
 public:
  // n_kv_head: key/value heads of the fused qkv (0: as many as query heads).
  RingAttention(Communicator& ring, RingOptions options = {}, int n_kv_head = 0);

  // AttentionOp over this rank's Tl tokens (in the ring layout): qkv [B, Tl, (H + 2 Hkv) D],
  // out [B, Tl, H D], lse [B, H, Tl] in local token order.
  void forward(float* out, float* lse, const float* qkv, int B, int T, int H, int D,
               AttentionSavedPtr& saved) override;
  // dqkv may be qkv (backward_in_place): dq accumulates in scratch [B, Tl, H D] while q is read,
  // K and V are read from the packed block, and the gradient is written over qkv.
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
                int T, int H, int D, const AttentionSaved* saved) override;
  bool backward_in_place() const override { return true; }

  // The schedule on views (the hybrid runs it on Ulysses' head-sharded tensors). dims.Tq = dims.Tk =
  // Tl. out [B, Tl, H, D] and lse [B, H, Tl] are overwritten; backward accumulates dq, dk, dv.
  void forward_heads(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims);
  // own_kv_over: dk and dv (which may be k and v, read only before the first step) are zeroed before
  // the own block's dK, dV are added, instead of accumulating onto what they hold.
  void backward_heads(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout, HeadsView out,
                      const float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims,
                      bool own_kv_over = false);

  size_t bytes() const override;
  // The scratch after the layers' forward and in-place backward (with dq's [B, T, H D]).
  size_t bytes_for(int B, int T, int H, int D, int n_layer) const override;
  // The scratch after forward_heads and backward_heads over Tl tokens of H query / Hkv kv heads.
  size_t bytes_for_heads(int B, int Tl, int H, int Hkv, int D) const;

  Communicator& comm() { return ring_; }
  const RingOptions& options() const { return options_; }
  void set_overlap(bool on) { options_.overlap = on; }
  const RingTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }

  // A run of a rank's tokens: global position of the first, first local row, length.
  using Segment = RingRun;  // (sequence_shard.h)
  // The segments of ring rank `rank` holding Tl tokens: one (contiguous) or two (zigzag).
  std::vector<Segment> segments(int rank, int Tl) const;

 private:
  void check_dims(const AttentionDims& d) const;
  // Step s of the ring: start receiving the next K|V block into kv_[(s+1)%2] and sending kv_[s%2] on.
  void pass_kv(int s, int64_t kv_n, RequestPtr& recv, RequestPtr& send);
  // Once step s's receive completed: the bf16 block widened into kv_[(s+1)%2] (bf16_wire only).
  void received_kv(int s, int64_t kv_n);

  Communicator& ring_;
  RingOptions options_;
  int n_kv_head_;
  RingTimes times_;
  // Scratch reused across calls: K|V blocks (two, double-buffered), travelling dK|dV accumulators
  // (two being sent, one being received), a block's out and lse, a slice of the saved lse, and dq of
  // an in-place backward.
  FloatBuffer kv_[2], dkv_[2], dkv_in_, blk_out_, blk_lse_, lse_rows_, dq_;
  std::vector<bf16> kv_send_, kv_recv_;  // bf16_wire: the block being sent and the one arriving
};

}  // namespace odyssey
