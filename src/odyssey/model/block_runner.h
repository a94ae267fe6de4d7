// The one block runner: every architecture's transformer block (its description, model/block.h) runs
// through these two functions in training (the stage), evaluation, the KV cache and the profile.
//
// Activations live in a BlockActs the caller owns (one per layer per micro-batch in flight); forward
// overwrites all of it, so a layer can be run again to recompute what it dropped. The qkv kept for
// backward is the one the attention read (after RoPE); RoPE's backward rotates dq, dk back.
//
// Sequence chunking (BlockShape::chunk, model/row_chunks.h): every token-local op (norms, projections,
// RoPE, activation, residual adds) runs over chunks of rows. The attention runs either over the whole
// sequence through the AttentionOp (ring, the hybrid and TP-SP need it whole): the forward runs the norm
// and qkv chunk by chunk, the attention, then the rest chunk by chunk; the backward the MLP and
// projection backward chunk by chunk, the attention backward, then the qkv and norm backward chunk by
// chunk; sequence-wide are x, qkv, the attention's output and lse, the output, and in backward
// d(residual), d(atty) and dqkv (key-outer, under the ring and the hybrid: none beside the qkv, which
// the op overwrites with it, §4.8). Or, with BlockShape::query_chunks (model/query_chunks.h: an op that
// chunks_queries(), the local one or Ulysses), per query chunk against the K/V prefix
// (long-context-memory.md §4.2, §4.3, §4.8, model/kv_prefix.h), the chunks within sequences: the
// forward runs each chunk whole (norm, qkv, the op storing its k and v into the prefix, its queries'
// attention, the rest), the backward walks the chunks last first (recompute, MLP backward, its queries'
// attention backward into dq and the prefix's dK, dV, which the op adds into the chunk's dqkv once
// complete, then the qkv and norm backward); sequence-wide are x, K and V (in the op's layout: Ulysses'
// head-sharded), the output, and in backward d(residual), dK and dV.
//
// Domino (tensor-pipeline-parallelism.md §2, model/domino.h): with two row chunks whose collectives
// progress while the caller computes, the chunks' steps interleave.
#pragma once

#include "odyssey/model/attention_op.h"
#include "odyssey/model/block.h"
#include "odyssey/model/linear_ops.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/recompute.h"

namespace odyssey {

// What a block call runs with: the architecture's block, the attention and linear seams (local ones in
// one process, Ulysses / ring / tensor-parallel ones under those layouts), the scratch every layer of a
// micro-batch shares, the sizes, RoPE's tables (with spec.rope) and an observer.
struct BlockCall {
  const BlockSpec& spec;
  AttentionOp& attention;
  LinearOps& linears;
  BlockScratch& scratch;
  BlockShape shape;
  RopeTables rope = {};
  OpObserver* observer = nullptr;
};

// a = block(x); x [R, C] is not modified (it is the previous layer's residual3 or the embeddings; R =
// linears.rows(N): every token, or this rank's TP-SP slice).
void block_forward(const BlockCall& call, BlockActs& a, const float* x, const BlockTensors& w);

// dres [R, C]: d(block output) in, d(x) out. Gradients accumulate into g (under TP-SP the norms' and row
// biases' are partial sums over this rank's tokens, which the step sums over tp). recompute: what a
// checkpoint policy dropped and the backward reruns first, with the forward's own calls
// (model/layer_loop.h).
void block_backward(const BlockCall& call, float* dres, BlockActs& a, const float* x, const BlockTensors& w,
                    const BlockTensors& g, const Recompute& recompute = {});

}  // namespace odyssey
