// The one attention kernel (DESIGN.md): a block of queries against a block of keys/values, with a
// mask kind, returning fp32 output and the log-sum-exp of each query row. Ulysses, ring, zigzag and
// chunked attention are schedules around it; the LSE lets partial results be merged exactly.
// Blockwise (flash-attention style): no [Tq, Tk] matrix is ever materialised.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "odyssey/core/bf16.h"

namespace odyssey {

// A strided view of a [B, T, heads, D] activation: element (b, t, h, d) lives at
// data[b * batch_stride + t * row_stride + h * D + d]. GPT-2's fused qkv buffer [B, T, 3C] is three
// such views with row_stride 3C and data offset by 0, C, 2C.
struct HeadsView {
  const float* data;
  int64_t batch_stride;
  int64_t row_stride;
};
struct MutHeadsView {
  float* data;
  int64_t batch_stride;
  int64_t row_stride;
};

// The same views over bf16 activations (mixed-precision.md §3: qkv, atty and their gradients' inputs).
struct Bf16HeadsView {
  const bf16* data;
  int64_t batch_stride;
  int64_t row_stride;
};
struct MutBf16HeadsView {
  bf16* data;
  int64_t batch_stride;
  int64_t row_stride;
};

// H query heads, Hkv key/value heads (H % Hkv == 0; query head h reads kv head h / (H / Hkv)).
struct AttentionDims {
  int B, Tq, Tk, H, Hkv, D;
};

enum class MaskKind { none, causal };

// Causal: key j (global position k_start + j) is visible to query i (global position q_start + i)
// iff k_start + j <= q_start + i. A query row that sees no key gets out = 0 and lse = -inf.
struct AttentionMask {
  MaskKind kind = MaskKind::causal;
  int64_t q_start = 0;
  int64_t k_start = 0;
};

// out [B, Tq, H, D] (overwritten), lse [B, H, Tq] (overwritten, natural log, of scale * q.k).
void attention_forward(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                       AttentionDims dims, AttentionMask mask, float scale);

// Accumulates dq [B, Tq, H, D], dk and dv [B, Tk, Hkv, D]. out and lse are the final values of the
// whole attention (for ring attention: after the LSE merge), as flash-attention's backward needs.
void attention_backward(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout, HeadsView out,
                        const float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims,
                        AttentionMask mask, float scale);

// The kernel under the bf16 policy (mixed-precision.md §3-§5.4): the same contract (out and LSE, masks
// with offsets, GQA, chunked and ring calls merging by LSE) over bf16 q, k, v. Products of bf16
// operands accumulate in fp32; the scores are scaled in fp32 after q.k (scale * q is not a bf16); the
// softmax statistics (max, sum, lse) are fp32; the probabilities P are rounded to bf16 only as the input
// of P.V (their row sum is of the fp32 values), and in the backward P and dS = P * (dP - Delta) are
// rounded to bf16 as the inputs of dV += P^T dO, dQ += dS K and dK += dS^T Q. out is written once, fp32
// (for a ring's LSE merge, spec §3) or rounded to bf16; dq, dk, dv accumulate in fp32 as the fp32
// kernel's (ring steps and chunks sum in fp32; the caller rounds the final gradient to bf16).
// Every path computes this with the same roundings; they differ from one another in summation order
// only. The avx512_bf16 path (a CPU with AVX512_BF16) runs the products as bf16 dot products with fp32
// accumulation (VDPBF16PS); the others run it on their fp32 tiles (bf16 storage, fp32 compute: the
// spec's §5.5 fallback, and the bf16 emulation the dot-product path is tested against).
void attention_forward_bf16(MutHeadsView out, float* lse, Bf16HeadsView q, Bf16HeadsView k, Bf16HeadsView v,
                            AttentionDims dims, AttentionMask mask, float scale);
void attention_forward_bf16(MutBf16HeadsView out, float* lse, Bf16HeadsView q, Bf16HeadsView k,
                            Bf16HeadsView v, AttentionDims dims, AttentionMask mask, float scale);
void attention_backward_bf16(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, Bf16HeadsView dout,
                             Bf16HeadsView out, const float* lse, Bf16HeadsView q, Bf16HeadsView k,
                             Bf16HeadsView v, AttentionDims dims, AttentionMask mask, float scale);
// The same over fp32 views (the model's fp32 copies of its bf16 activations, a K/V prefix, an fp32
// gradient): every value of q, k, v, out and dout is rounded to bf16 (RNE) as the kernel reads it,
// which changes nothing in a value the policy has rounded already.
void attention_forward_bf16(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                            AttentionDims dims, AttentionMask mask, float scale);
void attention_backward_bf16(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout, HeadsView out,
                             const float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims,
                             AttentionMask mask, float scale);

// The call an attention op makes under its train.precision: bf16 false, the fp32 kernel; true, the bf16
// policy's over the same fp32 views (above).
void attention_forward(bool bf16, MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                       AttentionDims dims, AttentionMask mask, float scale);
void attention_backward(bool bf16, MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout,
                        HeadsView out, const float* lse, HeadsView q, HeadsView k, HeadsView v,
                        AttentionDims dims, AttentionMask mask, float scale);

// The kernel has one path per vector ISA (attention_tiles.h): "avx512_bf16" (bf16 dot products for the
// bf16 policy, the avx512 path's fp32 kernel), "avx512", "avx2", "portable". Each call
// runs the widest the CPU supports, or the one the environment variable ODYSSEY_ATTN_ISA names
// (tests run every path; an unknown or unsupported name is an error naming it). The paths may differ in
// the last bits (their row sums add vectors of different widths); each is bitwise deterministic.
const char* attention_isa();                          // the path the next (fp32 or bf16) call runs
std::vector<std::string> attention_isas_supported();  // the paths this CPU runs, widest first

}  // namespace odyssey
