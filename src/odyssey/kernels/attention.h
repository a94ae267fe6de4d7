// The one attention kernel (DESIGN.md): a block of queries against a block of keys/values, with a
// mask kind, returning fp32 output and the log-sum-exp of each query row. Ulysses, ring, zigzag and
// chunked attention are schedules around it; the LSE lets partial results be merged exactly.
// Blockwise (flash-attention style): no [Tq, Tk] matrix is ever materialised.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// The kernel has one path per vector ISA (attention_tiles.h): "avx512", "avx2", "portable". Each call
// runs the widest the CPU supports, or the one the environment variable ODYSSEY_ATTN_ISA names
// (tests run every path; an unknown or unsupported name is an error naming it). The paths may differ in
// the last bits (their row sums add vectors of different widths); each is bitwise deterministic.
const char* attention_isa();                          // the path the next call runs
std::vector<std::string> attention_isas_supported();  // the paths this CPU runs, widest first

}  // namespace odyssey
