// The blockwise (flash-attention 2) attention algorithm and its schedules, written once over a set of
// tile products: attention.cpp instantiates it with the register-blocked micro-tiles of
// attention_tiles.h (the fast kernel), attention_reference.cpp with the first kernel's 16-float tiles
// (the reference the tests compare against). A Tiles type provides the vector type vf and width kW,
// the tile sizes kBlockQ, kBlockK and micro-tile rows kRows, vector load/store/splat/vmax/hmax/hsum/
// vexp, and the products abt (S = A . Bt) and ab<TransA> (C += op(A) . B).
//
// Forward: one task per (b, h, query block of kBlockQ rows); the task walks the key blocks its
// queries can see, keeping a running max m and sum l per row (online softmax), and never holds more
// than a [kBlockQ, kBlockK] tile of scores. Key blocks entirely above the causal diagonal are skipped;
// the mask is applied only on blocks that straddle it (and on the ragged last key block). Tasks are
// handed out largest first (the last query blocks under the causal mask), dynamically, so the causal
// imbalance evens out across threads.
//
// Backward (flash-attention 2): with Delta_i = rowsum(dO_i * O_i) and the saved lse, each (query
// block, key block) pair recomputes P = exp(S - lse) and gives
//   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  dQ += scale dS K,  dK += scale dS^T Q.
// Two race-free schedules, chosen per call (see choose_schedule):
//   fused: one task per (b, kv head) owns dK/dV of that head and dQ of its query heads: 5 block
//          products per pair, but only B * Hkv tasks;
//   split: pass 1 over (b, kv head, key block) accumulates dK/dV, pass 2 over (b, h, query block)
//          recomputes P and dS for dQ: 7 block products per pair, but plenty of tasks.
// Both sum every gradient in the same order with the same operations (no atomics, no reduction
// across threads), so the result is bitwise the same whichever schedule and thread count run.
//
// Elem = bf16 is the kernel under the bf16 policy (attention.h: attention_forward_bf16): the views hold
// bf16, packed here into the tiles' fp32 (exact), or fp32 (In = HeadsView: the model's fp32 copies of
// its bf16 activations, a K/V prefix, an fp32 gradient), rounded to bf16 as they are packed (exact for a
// value the policy rounded already); q is packed unscaled and the scores are scaled after the product; P (and
// dS in the backward) are rounded to bf16 after the exp, before the products that read them; K's gradient
// gets the scale when it is added out. Elem = float compiles exactly the fp32 kernel (every bf16 step is an
// `if constexpr`).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>

#include "odyssey/core/bf16.h"
#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/attention_workspace.h"
#include "odyssey/kernels/bf16_convert_lanes.h"

// The vector types only live inside inlined helpers; their ABI never crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace odyssey::attention_detail {

template <class Tiles, class Elem = float>
struct BlockwiseAttention {
  static constexpr bool kBf16 = std::is_same_v<Elem, bf16>;
  static_assert(kBf16 || std::is_same_v<Elem, float>);
  // The view type of the fp32 kernel's inputs, and the bf16 policy's own (it also reads HeadsView).
  using InView = std::conditional_t<kBf16, Bf16HeadsView, HeadsView>;
  static float widen(float x) { return kBf16 ? round_to_bf16(x) : x; }
  static float widen(bf16 x) { return bf16_to_float(x); }
  // The bf16 policy's rounding of P and dS: the first `rows` rows of a [*, kBlockK] tile, in place,
  // kW lanes at a time with the conversion paths' arithmetic (bf16_convert_lanes.h: core/bf16.h's RNE).
  static void round_tile_to_bf16(float* t, int rows) {
    using Lanes = bf16_lanes::Lanes<kW>;
    for (int64_t j = 0; j < int64_t{rows} * kBlockK; j += kW) {
      const auto rounded = Lanes::nearest_bits(Lanes::load_bits(t + j)) << 16;
      std::memcpy(t + j, &rounded, sizeof rounded);
    }
  }

  using vf = typename Tiles::vf;
  static constexpr int kW = Tiles::kW;
  static constexpr int kBlockQ = Tiles::kBlockQ;
  static constexpr int kBlockK = Tiles::kBlockK;
  static constexpr int kRows = Tiles::kRows;
  static_assert(kBlockK % kW == 0 && kBlockK % kRows == 0 && kBlockQ % kRows == 0);
  static constexpr int kKVecs = kBlockK / kW;
  static constexpr float kInf = std::numeric_limits<float>::infinity();

  static vf load(const float* p) { return Tiles::load(p); }
  static void store(float* p, vf v) { Tiles::store(p, v); }
  static vf splat(float x) { return Tiles::splat(x); }
  static vf vmax(vf a, vf b) { return Tiles::vmax(a, b); }
  static float hmax(vf v) { return Tiles::hmax(v); }
  static float hsum(vf v) { return Tiles::hsum(v); }
  static vf vexp(vf x) { return Tiles::vexp(x); }
  // S[M, kBlockK] = A[M, :D] . Bt[D, kBlockK] (a transposed key or value block); M a multiple of kRows.
  static void abt(float* s, const float* a, int64_t lda, const float* bt, int D, int M) {
    Tiles::abt(s, a, lda, bt, D, M);
  }
  // C[M, W] += op(A)[M, K] . B[K, W], op(A) = A or A^T.
  template <bool TransA>
  static void ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int M,
                 int K, int W) {
    Tiles::template ab<TransA>(c, ldc, a, lda, b, ldb, M, K, W);
  }

  static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

  // Everything a task needs to know about the call, with the block geometry.
  struct Geometry {
    AttentionDims dims;
    AttentionMask mask;
    int group;  // query heads per kv head
    int Dp;     // head size padded to a multiple of the vector width kW
    int nqb, nkb;
    int64_t tq_pad, tk_pad;

    Geometry(AttentionDims d, AttentionMask m) : dims(d), mask(m) {
      group = d.H / d.Hkv;
      Dp = static_cast<int>(round_up(d.D, kW));
      nqb = (d.Tq + kBlockQ - 1) / kBlockQ;
      nkb = (d.Tk + kBlockK - 1) / kBlockK;
      tq_pad = int64_t{nqb} * kBlockQ;
      tk_pad = int64_t{nkb} * kBlockK;
    }
    int q_rows(int qb) const { return std::min(kBlockQ, dims.Tq - qb * kBlockQ); }
    int k_cols(int kb) const { return std::min(kBlockK, dims.Tk - kb * kBlockK); }

    enum class Tile { skip, full, masked };
    // Whether tile (qb, kb) is entirely hidden, entirely visible, or needs the mask applied (it
    // straddles the diagonal, or its last key columns are padding).
    Tile classify(int qb, int kb) const {
      int rows = q_rows(qb), cols = k_cols(kb);
      bool full = true;
      if (mask.kind == MaskKind::causal) {
        int64_t q_first = mask.q_start + int64_t{qb} * kBlockQ, q_last = q_first + rows - 1;
        int64_t k_first = mask.k_start + int64_t{kb} * kBlockK, k_last = k_first + cols - 1;
        if (k_first > q_last) return Tile::skip;
        full = k_last <= q_first;
      }
      return full && cols == kBlockK ? Tile::full : Tile::masked;
    }
    // Sets hidden scores of tile (qb, kb) to -inf: S [kBlockQ, kBlockK], rows < M.
    void apply_mask(float* s, int qb, int kb, int M) const {
      int cols = k_cols(kb);
      for (int i = 0; i < M; ++i) {
        int64_t last = cols - 1;  // last visible column of row i
        if (mask.kind == MaskKind::causal)
          last =
              std::min(last, mask.q_start + int64_t{qb} * kBlockQ + i - mask.k_start - int64_t{kb} * kBlockK);
        for (int64_t j = std::max<int64_t>(last + 1, 0); j < kBlockK; ++j) s[i * kBlockK + j] = -kInf;
      }
    }
  };

  using Tile = typename Geometry::Tile;

  // Row-major copy of one head of a [B, T, heads, D] view into [t_pad, Dp], times mult, zero padded.
  template <class In>
  static void pack_rows(float* dst, In src, int b, int h, int T, int64_t t_pad, int D, int Dp, float mult) {
    for (int64_t t = 0; t < t_pad; ++t) {
      float* d = dst + t * Dp;
      int c = 0;
      if (t < T) {
        const auto* s = src.data + b * src.batch_stride + t * src.row_stride + int64_t{h} * D;
        for (; c < D; ++c) d[c] = mult * widen(s[c]);
      }
      for (; c < Dp; ++c) d[c] = 0.0f;
    }
  }

  // One head of a [B, T, heads, D] view as transposed key blocks [nb][D][kBlockK], zero padded.
  // Columns outer, keys inner: the block's source rows stay in L1 while each output row is written
  // contiguously (keys outer scattered every store kBlockK floats apart: 9% of a T = 1K forward).
  template <class In>
  static void pack_transposed(float* dst, In src, int b, int h, int T, int nb, int D) {
    for (int blk = 0; blk < nb; ++blk) {
      float* d = dst + int64_t{blk} * D * kBlockK;
      const int cols = static_cast<int>(std::min<int64_t>(kBlockK, T - int64_t{blk} * kBlockK));
      const auto* s =
          src.data + b * src.batch_stride + int64_t{blk} * kBlockK * src.row_stride + int64_t{h} * D;
      for (int c = 0; c < D; ++c) {
        float* dc = d + int64_t{c} * kBlockK;
        for (int j = 0; j < cols; ++j) dc[j] = widen(s[j * src.row_stride + c]);
        for (int j = cols; j < kBlockK; ++j) dc[j] = 0.0f;
      }
    }
  }

  // The cache line at p into L1. On x86 an asm statement: g++ 12 deleted a loop of
  // __builtin_prefetch (or _mm_prefetch) calls as code without effect, and the built kernels held no
  // prefetch instruction at all.
  static void prefetch_line(const char* p) {
#if defined(__x86_64__) || defined(__i386__)
    asm volatile("prefetcht0 %0" : : "m"(*p));
#else
    __builtin_prefetch(p, 0, 3);
#endif
  }

  // Floats [p, p + n) prefetched into L1 in `parts` equal shares of cache lines, share i by part(i): the
  // forward's next key block, spread over the rows of the current block's softmax so that it arrives
  // before the next block's products load it (one head's K and V outgrow L2 from T = 4K at D = 64). The
  // shares are computed once per block, not per row. No bits change.
  struct SpreadPrefetch {
    static constexpr int64_t kLine = 64;
    const char* bytes = nullptr;  // null: nothing to prefetch
    int64_t total = 0, share = 0;
    SpreadPrefetch() = default;
    SpreadPrefetch(const float* p, int64_t n, int parts)
        : bytes(reinterpret_cast<const char*>(p)),
          total(n * int64_t{sizeof(float)}),
          share(round_up(total, kLine * parts) / parts) {}
    void part(int i) const {
      if (!bytes) return;
      const int64_t end = std::min(total, (i + 1) * share);
      for (int64_t off = i * share; off < end; off += kLine) prefetch_line(bytes + off);
    }
  };

  // A call's scratch is carved from the calling thread's workspace (attention_workspace.h), kept
  // between calls: a layout reserves regions of n floats, each 64-byte aligned, then the call takes the
  // workspace once. Every region is fully written before it is read (it holds the previous call's data).
  struct Layout {
    int64_t floats = 0;
    int64_t add(int64_t n) {  // the region's offset
      const int64_t at = floats;
      floats += round_up(std::max<int64_t>(n, 1), 16);
      return at;
    }
    // One region of n floats per OpenMP thread; thread_region gives the calling thread's.
    int64_t add_per_thread(int64_t n) {
      per_thread = round_up(std::max<int64_t>(n, 1), 16);
      return add(per_thread * omp_get_max_threads());
    }
    int64_t per_thread = 0;
  };
  struct Workspace {
    float* base;
    explicit Workspace(const Layout& layout) : base(attention_workspace(layout.floats)) {}
    ~Workspace() { attention_workspace_done(); }
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    float* at(int64_t offset) const { return base + offset; }
    float* thread_region(const Layout& layout, int64_t offset) const {
      return base + offset + layout.per_thread * omp_get_thread_num();
    }
  };

  static void check_dims(const AttentionDims& d) {
    ODY_CHECK(d.B >= 0 && d.Tq >= 0 && d.Tk >= 0, "attention: negative size (B={}, Tq={}, Tk={})", d.B, d.Tq,
              d.Tk);
    ODY_CHECK(d.H > 0 && d.Hkv > 0 && d.D > 0, "attention: H={}, Hkv={}, D={} must be positive", d.H, d.Hkv,
              d.D);
    ODY_CHECK(d.H % d.Hkv == 0, "attention: H={} is not a multiple of Hkv={}", d.H, d.Hkv);
  }

  // ---------------------------------------------------------------------------------------------------
  // Forward

  // Out: MutHeadsView (fp32 out) or, under the bf16 policy, MutBf16HeadsView; In: InView or HeadsView.
  template <class Out, class In>
  struct ForwardCtx {
    const Geometry& g;
    Out out;
    float* lse;
    In q;
    float scale;
    const float* kt;  // [B, Hkv][nkb][D][kBlockK]
    const float* vr;  // [B, Hkv][tk_pad][Dp]
  };

  // Per-thread tiles for the forward, carved from `buf` (floats(Dp) of them).
  struct ForwardTiles {
    float *qs, *s, *o, *m, *l;
    static int64_t floats(int Dp) { return int64_t{kBlockQ} * (2 * Dp + kBlockK + 2); }
    ForwardTiles(float* buf, int Dp) {
      qs = buf;
      o = qs + kBlockQ * Dp;
      s = o + kBlockQ * Dp;
      m = s + kBlockQ * kBlockK;
      l = m + kBlockQ;
    }
  };

  template <class Out, class In>
  static void forward_task(const ForwardCtx<Out, In>& c, ForwardTiles& t, int b, int h, int qb) {
    const Geometry& g = c.g;
    const int D = g.dims.D, Dp = g.Dp, rows = g.q_rows(qb);
    const int M = static_cast<int>(round_up(rows, kRows));
    const int hkv = h / g.group;
    const int64_t kv = int64_t{b} * g.dims.Hkv + hkv;

    // Qs [M, Dp] = scale * q rows of this block; the scale is folded in once here (bf16: Qs = q, and
    // the scores are scaled).
    for (int i = 0; i < M; ++i) {
      float* d = t.qs + i * Dp;
      int col = 0;
      if (i < rows) {
        const auto* s =
            c.q.data + b * c.q.batch_stride + (int64_t{qb} * kBlockQ + i) * c.q.row_stride + int64_t{h} * D;
        if constexpr (kBf16) {
          for (; col < D; ++col) d[col] = widen(s[col]);
        } else {
          for (; col < D; ++col) d[col] = c.scale * s[col];
        }
      }
      for (; col < Dp; ++col) d[col] = 0.0f;
    }
    std::fill(t.o, t.o + M * Dp, 0.0f);
    std::fill(t.m, t.m + M, -kInf);
    std::fill(t.l, t.l + M, 0.0f);

    for (int kb = 0; kb < g.nkb; ++kb) {
      Tile tile = g.classify(qb, kb);
      if (tile == Tile::skip) continue;
      abt(t.s, t.qs, Dp, c.kt + (kv * g.nkb + kb) * D * kBlockK, D, M);  // S [M, kBlockK]
      if (tile == Tile::masked) g.apply_mask(t.s, qb, kb, M);

      // The next key block's K^T [D, kBlockK] and V [kBlockK, Dp], prefetched a share per score row.
      SpreadPrefetch next_k, next_v;
      if (kb + 1 < g.nkb) {
        next_k = {c.kt + (kv * g.nkb + kb + 1) * D * kBlockK, int64_t{D} * kBlockK, M};
        next_v = {c.vr + (kv * g.tk_pad + int64_t{kb + 1} * kBlockK) * Dp, int64_t{kBlockK} * Dp, M};
      }

      // Online softmax: P = exp(S - m_new) in place of S; O and l rescaled by exp(m_old - m_new).
      for (int i = 0; i < M; ++i) {
        next_k.part(i);
        next_v.part(i);
        float* s = t.s + i * kBlockK;
        vf x[kKVecs];
        vf mx = splat(-kInf);
        for (int v = 0; v < kKVecs; ++v) {
          x[v] = load(s + v * kW);
          if constexpr (kBf16) x[v] = x[v] * splat(c.scale);
          mx = vmax(mx, x[v]);
        }
        float m_new = std::max(t.m[i], hmax(mx));
        if (m_new == -kInf) {  // nothing visible to this row yet
          std::fill(s, s + kBlockK, 0.0f);
          continue;
        }
        vf sum = {};
        for (int v = 0; v < kKVecs; ++v) {
          vf e = vexp(x[v] - splat(m_new));
          store(s + v * kW, e);
          sum += e;
        }
        // 0 when m_old = -inf; exp(0) = 1 exactly, so the call (a libm call per row and key block) is
        // skipped once the row's max has settled.
        if constexpr (kBf16) round_tile_to_bf16(s, 1);  // P.V reads bf16 P; l sums the fp32 P
        float alpha = t.m[i] == m_new ? 1.0f : std::exp(t.m[i] - m_new);
        t.l[i] = t.l[i] * alpha + hsum(sum);
        t.m[i] = m_new;
        if (alpha != 1.0f) {
          float* o = t.o + i * Dp;
#pragma omp simd
          for (int col = 0; col < Dp; ++col) o[col] *= alpha;
        }
      }
      ab<false>(t.o, Dp, t.s, kBlockK, c.vr + (kv * g.tk_pad + int64_t{kb} * kBlockK) * Dp, Dp, M, kBlockK,
                Dp);
    }

    for (int i = 0; i < rows; ++i) {
      int64_t tq = int64_t{qb} * kBlockQ + i;
      auto* o = c.out.data + b * c.out.batch_stride + tq * c.out.row_stride + int64_t{h} * D;
      float l = t.l[i];
      float inv = l > 0.0f ? 1.0f / l : 0.0f;  // fully masked row: out = 0
      if constexpr (std::is_same_v<Out, MutHeadsView>) {
        for (int col = 0; col < D; ++col) o[col] = t.o[i * Dp + col] * inv;
      } else {
        for (int col = 0; col < D; ++col) o[col] = to_bf16(t.o[i * Dp + col] * inv);
      }
      c.lse[(int64_t{b} * g.dims.H + h) * g.dims.Tq + tq] = l > 0.0f ? t.m[i] + std::log(l) : -kInf;
    }
  }

  // ---------------------------------------------------------------------------------------------------
  // Backward

  struct BackwardCtx {
    const Geometry& g;
    MutHeadsView dq, dk, dv;
    float scale;
    // Packed per (b, h): Qs = scale * q and dO as [tq_pad, Dp]; lse (+inf where the row sees nothing,
    // so that P = 0 there) and Delta as [tq_pad].
    const float *qs, *dout, *lse, *delta;
    // Packed per (b, kv head): K and V transposed [nkb][D][kBlockK], K row-major [tk_pad, Dp].
    const float *kt, *vt, *kr;

    const float* qs_at(int b, int h, int qb) const {
      return qs + ((int64_t{b} * g.dims.H + h) * g.tq_pad + int64_t{qb} * kBlockQ) * g.Dp;
    }
    const float* dout_at(int b, int h, int qb) const {
      return dout + ((int64_t{b} * g.dims.H + h) * g.tq_pad + int64_t{qb} * kBlockQ) * g.Dp;
    }
    int64_t row_at(int b, int h, int qb) const {
      return (int64_t{b} * g.dims.H + h) * g.tq_pad + int64_t{qb} * kBlockQ;
    }
    int64_t kv_at(int b, int hkv) const { return int64_t{b} * g.dims.Hkv + hkv; }
  };

  // Per-thread tiles for the backward: P and dS [kBlockQ, kBlockK], dK/dV accumulators [kBlockK, Dp],
  // carved from `buf` (floats(Dp) of them).
  struct BackwardTiles {
    float *p, *ds, *dk, *dv;
    static int64_t floats(int Dp) { return 2 * int64_t{kBlockQ} * kBlockK + 2 * int64_t{kBlockK} * Dp; }
    BackwardTiles(float* buf, int Dp) {
      p = buf;
      ds = p + kBlockQ * kBlockK;
      dk = ds + kBlockQ * kBlockK;
      dv = dk + kBlockK * Dp;
    }
  };

  // P = exp(S - lse) and dS = P * (dP - Delta) (without the scale) for tile (qb of head h, kb).
  static void probs_and_dscores(const BackwardCtx& c, BackwardTiles& t, int b, int h, int qb, int kb,
                                Tile tile, int M) {
    const Geometry& g = c.g;
    const int D = g.dims.D;
    const int64_t kv = c.kv_at(b, h / g.group), row = c.row_at(b, h, qb);
    const float* lse = c.lse + row;
    const float* delta = c.delta + row;
    abt(t.p, c.qs_at(b, h, qb), g.Dp, c.kt + (kv * g.nkb + kb) * D * kBlockK, D, M);
    if (tile == Tile::masked) g.apply_mask(t.p, qb, kb, M);
    abt(t.ds, c.dout_at(b, h, qb), g.Dp, c.vt + (kv * g.nkb + kb) * D * kBlockK, D, M);  // dP
    for (int i = 0; i < M; ++i) {
      float* p = t.p + i * kBlockK;
      float* ds = t.ds + i * kBlockK;
      const vf li = splat(lse[i]), di = splat(delta[i]);
      for (int j = 0; j < kBlockK; j += kW) {
        vf sj = load(p + j);
        if constexpr (kBf16) sj = sj * splat(c.scale);
        vf e = vexp(sj - li);
        store(p + j, e);
        store(ds + j, e * (load(ds + j) - di));
      }
    }
    if constexpr (kBf16) {  // dV += P^T dO, dQ += dS K and dK += dS^T Q read bf16 P and dS
      round_tile_to_bf16(t.p, M);
      round_tile_to_bf16(t.ds, M);
    }
  }

  // dK/dV of key block kb of kv head hkv from every query head of its group; then added to dk, dv.
  static void dkdv_block(const BackwardCtx& c, BackwardTiles& t, int b, int hkv, int kb, float* dq_acc) {
    const Geometry& g = c.g;
    const int Dp = g.Dp;
    std::fill(t.dk, t.dk + kBlockK * Dp, 0.0f);
    std::fill(t.dv, t.dv + kBlockK * Dp, 0.0f);
    for (int gi = 0; gi < g.group; ++gi) {
      const int h = hkv * g.group + gi;
      for (int qb = 0; qb < g.nqb; ++qb) {
        Tile tile = g.classify(qb, kb);
        if (tile == Tile::skip) continue;
        const int M = static_cast<int>(round_up(g.q_rows(qb), kRows));
        probs_and_dscores(c, t, b, h, qb, kb, tile, M);
        ab<true>(t.dv, Dp, t.p, kBlockK, c.dout_at(b, h, qb), Dp, kBlockK, M, Dp);  // dV += P^T dO
        ab<true>(t.dk, Dp, t.ds, kBlockK, c.qs_at(b, h, qb), Dp, kBlockK, M, Dp);   // dK += dS^T Qs
        if (dq_acc) {  // fused schedule: dQ += dS K
          const float* kr = c.kr + (c.kv_at(b, hkv) * g.tk_pad + int64_t{kb} * kBlockK) * Dp;
          ab<false>(dq_acc + (int64_t{gi} * g.tq_pad + int64_t{qb} * kBlockQ) * Dp, Dp, t.ds, kBlockK, kr, Dp,
                    M, kBlockK, Dp);
        }
      }
    }
    const int cols = g.k_cols(kb), D = g.dims.D;
    for (int j = 0; j < cols; ++j) {
      int64_t tk = int64_t{kb} * kBlockK + j;
      float* dk = c.dk.data + b * c.dk.batch_stride + tk * c.dk.row_stride + int64_t{hkv} * D;
      float* dv = c.dv.data + b * c.dv.batch_stride + tk * c.dv.row_stride + int64_t{hkv} * D;
      for (int col = 0; col < D; ++col) {
        if constexpr (kBf16) {
          dk[col] += c.scale * t.dk[j * Dp + col];  // Qs was q: the scale comes here
        } else {
          dk[col] += t.dk[j * Dp + col];
        }
        dv[col] += t.dv[j * Dp + col];
      }
    }
  }

  // dq rows [rows] of head h starting at query t0 += scale * acc [rows, Dp].
  static void add_dq(const BackwardCtx& c, int b, int h, int64_t t0, int rows, const float* acc) {
    const int D = c.g.dims.D, Dp = c.g.Dp;
    for (int i = 0; i < rows; ++i) {
      float* dq = c.dq.data + b * c.dq.batch_stride + (t0 + i) * c.dq.row_stride + int64_t{h} * D;
      for (int col = 0; col < D; ++col) dq[col] += c.scale * acc[i * Dp + col];
    }
  }

  enum class Schedule { fused, split };

  // The fused schedule does 5/7 of the split schedule's block products but has only B * Hkv equal
  // tasks. Use it when those tasks keep the threads at least as busy as the ~5/7 the extra work of the
  // split schedule costs. ODYSSEY_ATTN_BWD=fused|split overrides (benchmarks and tests).
  static Schedule choose_schedule(const AttentionDims& d) {
    if (const char* env = std::getenv("ODYSSEY_ATTN_BWD")) {
      std::string_view s(env);
      if (s == "fused") return Schedule::fused;
      if (s == "split") return Schedule::split;
    }
    int64_t threads = omp_get_max_threads(), tasks = int64_t{d.B} * d.Hkv;
    if (tasks == 0) return Schedule::fused;
    int64_t rounds = (tasks + threads - 1) / threads;
    double busy = static_cast<double>(tasks) / static_cast<double>(rounds * threads);
    return busy >= 5.0 / 7.0 ? Schedule::fused : Schedule::split;
  }

  template <class Out, class In = InView>
  static void forward(Out out, float* lse, In q, In k, In v, AttentionDims dims, AttentionMask mask,
                      float scale) {
    check_dims(dims);
    const Geometry g(dims, mask);
    const int B = dims.B, H = dims.H, Hkv = dims.Hkv, D = dims.D, Dp = g.Dp;
    if (B == 0 || dims.Tq == 0) return;

    // K transposed and V padded, once per (b, kv head), shared by every query block that reads them;
    // then each thread's tiles.
    Layout layout;
    const int64_t kt_at = layout.add(int64_t{B} * Hkv * g.tk_pad * D);
    const int64_t vr_at = layout.add(int64_t{B} * Hkv * g.tk_pad * Dp);
    const int64_t tiles_at = layout.add_per_thread(ForwardTiles::floats(Dp));
    const Workspace ws(layout);
    float *kt = ws.at(kt_at), *vr = ws.at(vr_at);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * Hkv; ++bh) {
      pack_transposed(kt + int64_t{bh} * g.tk_pad * D, k, bh / Hkv, bh % Hkv, dims.Tk, g.nkb, D);
      pack_rows(vr + int64_t{bh} * g.tk_pad * Dp, v, bh / Hkv, bh % Hkv, dims.Tk, g.tk_pad, D, Dp, 1.0f);
    }

    const ForwardCtx<Out, In> ctx{g, out, lse, q, scale, kt, vr};
    const int64_t tasks = int64_t{B} * H * g.nqb;
#pragma omp parallel
    {
      ForwardTiles tiles(ws.thread_region(layout, tiles_at), Dp);
      // Largest causal tasks (last query blocks) first, so the dynamic schedule ends balanced.
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < tasks; ++task) {
        int qb = g.nqb - 1 - static_cast<int>(task / (int64_t{B} * H));
        int bh = static_cast<int>(task % (int64_t{B} * H));
        forward_task(ctx, tiles, bh / H, bh % H, qb);
      }
    }
  }

  template <class In = InView>
  static void backward(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, In dout, In out, const float* lse,
                       In q, In k, In v, AttentionDims dims, AttentionMask mask, float scale) {
    check_dims(dims);
    const Geometry g(dims, mask);
    const int B = dims.B, H = dims.H, Hkv = dims.Hkv, D = dims.D, Dp = g.Dp;
    if (B == 0 || dims.Tq == 0 || dims.Tk == 0) return;

    // The packed inputs every task reads, then each thread's tiles and dQ accumulator: the fused
    // schedule's holds its task's query heads, the split schedule's one query block.
    const Schedule schedule = choose_schedule(dims);
    Layout layout;
    const int64_t qs_at = layout.add(int64_t{B} * H * g.tq_pad * Dp);
    const int64_t dop_at = layout.add(int64_t{B} * H * g.tq_pad * Dp);
    const int64_t lsep_at = layout.add(int64_t{B} * H * g.tq_pad);
    const int64_t delta_at = layout.add(int64_t{B} * H * g.tq_pad);
    const int64_t kt_at = layout.add(int64_t{B} * Hkv * g.tk_pad * D);
    const int64_t vt_at = layout.add(int64_t{B} * Hkv * g.tk_pad * D);
    const int64_t kr_at = layout.add(int64_t{B} * Hkv * g.tk_pad * Dp);
    const int64_t dq_floats =
        schedule == Schedule::fused ? int64_t{g.group} * g.tq_pad * Dp : int64_t{kBlockQ} * Dp;
    const int64_t thread_at = layout.add_per_thread(BackwardTiles::floats(Dp) + dq_floats);
    const Workspace ws(layout);
    float *qs = ws.at(qs_at), *dop = ws.at(dop_at), *lsep = ws.at(lsep_at), *delta = ws.at(delta_at),
          *kt = ws.at(kt_at), *vt = ws.at(vt_at), *kr = ws.at(kr_at);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      const int64_t base = int64_t{bh} * g.tq_pad;
      pack_rows(qs + base * Dp, q, b, h, dims.Tq, g.tq_pad, D, Dp, kBf16 ? 1.0f : scale);
      pack_rows(dop + base * Dp, dout, b, h, dims.Tq, g.tq_pad, D, Dp, 1.0f);
      for (int64_t t = 0; t < g.tq_pad; ++t) {
        float l = t < dims.Tq ? lse[int64_t{bh} * dims.Tq + t] : -kInf;
        lsep[base + t] = l == -kInf ? kInf : l;  // rows that see no key: P = exp(S - inf) = 0
        double acc = 0.0;
        if (t < dims.Tq) {
          const auto* o = out.data + b * out.batch_stride + t * out.row_stride + int64_t{h} * D;
          const auto* g_o = dout.data + b * dout.batch_stride + t * dout.row_stride + int64_t{h} * D;
          for (int col = 0; col < D; ++col) acc += double{widen(o[col])} * widen(g_o[col]);
        }
        delta[base + t] = static_cast<float>(acc);
      }
    }
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * Hkv; ++bh) {
      const int b = bh / Hkv, h = bh % Hkv;
      pack_transposed(kt + int64_t{bh} * g.tk_pad * D, k, b, h, dims.Tk, g.nkb, D);
      pack_transposed(vt + int64_t{bh} * g.tk_pad * D, v, b, h, dims.Tk, g.nkb, D);
      pack_rows(kr + int64_t{bh} * g.tk_pad * Dp, k, b, h, dims.Tk, g.tk_pad, D, Dp, 1.0f);
    }

    const BackwardCtx ctx{g, dq, dk, dv, scale, qs, dop, lsep, delta, kt, vt, kr};
    if (schedule == Schedule::fused) {
#pragma omp parallel
      {
        float* mine = ws.thread_region(layout, thread_at);
        BackwardTiles tiles(mine, Dp);
        float* dq_acc = mine + BackwardTiles::floats(Dp);  // dQ of the task's query heads
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < B * Hkv; ++bh) {
          const int b = bh / Hkv, hkv = bh % Hkv;
          std::fill(dq_acc, dq_acc + dq_floats, 0.0f);
          for (int kb = 0; kb < g.nkb; ++kb) dkdv_block(ctx, tiles, b, hkv, kb, dq_acc);
          for (int gi = 0; gi < g.group; ++gi)
            add_dq(ctx, b, hkv * g.group + gi, 0, dims.Tq, dq_acc + int64_t{gi} * g.tq_pad * Dp);
        }
      }
      return;
    }

#pragma omp parallel
    {
      float* mine = ws.thread_region(layout, thread_at);
      BackwardTiles tiles(mine, Dp);
      float* dq_acc = mine + BackwardTiles::floats(Dp);  // one query block's dQ
      // Pass 1: dK, dV; each task owns one key block of one kv head. Early key blocks see the most
      // queries under the causal mask, so they go first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < int64_t{B} * Hkv * g.nkb; ++task) {
        const int kb = static_cast<int>(task / (int64_t{B} * Hkv)),
                  bh = static_cast<int>(task % (int64_t{B} * Hkv));
        dkdv_block(ctx, tiles, bh / Hkv, bh % Hkv, kb, nullptr);
      }
      // Pass 2: dQ; each task owns one query block of one head. Last query blocks are largest.
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < int64_t{B} * H * g.nqb; ++task) {
        const int qb = g.nqb - 1 - static_cast<int>(task / (int64_t{B} * H));
        const int bh = static_cast<int>(task % (int64_t{B} * H)), b = bh / H, h = bh % H;
        const int rows = g.q_rows(qb), M = static_cast<int>(round_up(rows, kRows));
        std::fill(dq_acc, dq_acc + dq_floats, 0.0f);
        for (int kb = 0; kb < g.nkb; ++kb) {
          Tile tile = g.classify(qb, kb);
          if (tile == Tile::skip) continue;
          probs_and_dscores(ctx, tiles, b, h, qb, kb, tile, M);
          const float* krow = ctx.kr + (ctx.kv_at(b, h / g.group) * g.tk_pad + int64_t{kb} * kBlockK) * Dp;
          ab<false>(dq_acc, Dp, tiles.ds, kBlockK, krow, Dp, M, kBlockK, Dp);
        }
        add_dq(ctx, b, h, int64_t{qb} * kBlockQ, rows, dq_acc);
      }
    }
  }
};

}  // namespace odyssey::attention_detail
