// Sequence-parallel attention (Ulysses, ring contiguous / zigzag, their hybrid) against the
// single-process kernel: every (sp_ulysses, sp_ring) factorisation of the world (np 1, 2, 4), odd
// sizes (5 heads for the ring, head size 24, batch 3, 19-token zigzag chunks), GQA with and without
// KV replication. Each rank builds the full reference from the same seed and slices it with
// shard_positions, the function the trainer uses. Also: the bytes each layout moves equal the
// formulas of the spec (ulysses.h, ring_attention.h), and Ulysses' volume per rank at T = T0 * P.
//
// Tolerances (fp32; errors relative to the largest magnitude of the reference tensor): out, lse
// 2e-6, dq, dk, dv 1e-5 (measured at most ~1e-6). The distributed result differs from the reference only in
// summation order (LSE merges, per-block dK/dV sums, replicated-KV sums); Ulysses alone is bitwise equal.
// The ring's and the hybrid's in-place backward (the gradient over the qkv) is bitwise the separate one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/model/fused_qkv.h"
#include "odyssey/parallel/usp_attention.h"
#include "sp_test_util.h"

namespace odyssey {
namespace {

using sp_test::Layout;

struct Heads {
  int H, Hkv;
};

struct Case {
  Layout layout;
  Heads heads;
  int B = 3, T = 152, D = 24;
  int progress_rows = 48;  // small, so the ring also splits its blocks
};

// Largest |got - want| over the largest |want|.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return err / std::max(scale, 1e-30);
}

struct Errors {
  double out = 0, lse = 0, dqkv = 0;
};

struct Bytes {
  uint64_t a2a_fwd = 0, p2p_fwd = 0, a2a_bwd = 0, p2p_bwd = 0;
};

// Runs one case on this rank and returns the errors against the single-process kernel.
Errors run_case(const Case& c, Bytes* bytes = nullptr) {
  const int B = c.B, T = c.T, D = c.D, H = c.heads.H, Hkv = c.heads.Hkv;
  const FusedQkv f{H, Hkv, D};
  const int64_t W = f.width();
  // The reference: the kernel over the whole row.
  const std::vector<float> qkv = sp_test::uniform(size_t(B) * T * W, 11, 2.0f);
  const std::vector<float> dout = sp_test::uniform(size_t(B) * T * H * D, 12, 1.0f);
  std::vector<float> out(size_t(B) * T * H * D), lse(size_t(B) * H * T), dqkv(qkv.size(), 0.0f);
  const float scale = 1.0f / std::sqrt(float(D));
  const AttentionDims dims{B, T, T, H, Hkv, D};
  attention_forward(heads_view(out.data(), T, H, D), lse.data(), f.q(qkv.data(), T), f.k(qkv.data(), T),
                    f.v(qkv.data(), T), dims, {}, scale);
  attention_backward(f.q(dqkv.data(), T), f.k(dqkv.data(), T), f.v(dqkv.data(), T),
                     heads_view(dout.data(), T, H, D), as_const(heads_view(out.data(), T, H, D)), lse.data(),
                     f.q(qkv.data(), T), f.k(qkv.data(), T), f.v(qkv.data(), T), dims, {}, scale);

  ProcessGrid grid(world(), {.sp_ulysses = c.layout.U, .sp_ring = c.layout.R});
  SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring(),
                               {c.layout.layout, Hkv, true, c.progress_rows});
  const std::vector<int> pos = shard_positions(T, op.shard());
  const int Tl = int(pos.size());
  // This rank's rows of the inputs and of the expected results.
  auto rows = [&](const std::vector<float>& x, int64_t w) {
    std::vector<float> y(size_t(B) * Tl * w);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < Tl; ++i)
        std::copy_n(x.begin() + (int64_t(b) * T + pos[size_t(i)]) * w, w,
                    y.begin() + (int64_t(b) * Tl + i) * w);
    return y;
  };
  const std::vector<float> qkv_l = rows(qkv, W), dout_l = rows(dout, int64_t(H) * D);
  std::vector<float> out_l(size_t(B) * Tl * H * D), lse_l(size_t(B) * H * Tl), dqkv_l(qkv_l.size(), 0.0f);

  Communicator& w = world();
  w.barrier();
  w.stats().reset();
  AttentionSavedPtr saved;
  op.forward(out_l.data(), lse_l.data(), qkv_l.data(), B, Tl, H, D, saved);
  if (bytes) {
    bytes->a2a_fwd = w.stats().bytes(CommKind::all_to_all);
    bytes->p2p_fwd = w.stats().bytes(CommKind::send_recv);
  }
  w.stats().reset();
  op.backward(dqkv_l.data(), dout_l.data(), out_l.data(), lse_l.data(), qkv_l.data(), B, Tl, H, D,
              saved.get());
  if (bytes) {
    bytes->a2a_bwd = w.stats().bytes(CommKind::all_to_all);
    bytes->p2p_bwd = w.stats().bytes(CommKind::send_recv);
  }
  // In place (the ring and the hybrid, long-context-memory.md §4.8): the gradient written over the
  // layer's qkv (zeroed for an op that never reads it) is bitwise the separate dqkv.
  EXPECT_EQ(op.backward_in_place(), c.layout.R > 1 || c.layout.U == 1);
  if (op.backward_in_place()) {
    std::vector<float> in_place = qkv_l;
    if (op.saves_qkv()) std::fill(in_place.begin(), in_place.end(), 0.0f);
    op.backward(in_place.data(), dout_l.data(), out_l.data(), lse_l.data(),
                op.saves_qkv() ? nullptr : in_place.data(), B, Tl, H, D, saved.get());
    EXPECT_EQ(in_place, dqkv_l) << c.layout.name() << " H=" << H << " Hkv=" << Hkv;
  }

  // The lse the op keeps: [B, H, Tl] for the ring; head-sharded [B, H/U, T/R] with Ulysses, over the
  // ring rank's tokens (the Ulysses peers' tokens in peer order).
  const SequenceShard sh = op.shard();
  std::vector<int> lse_tokens = pos;
  int lse_heads = H, first_head = 0;
  if (sh.ulysses > 1) {
    lse_tokens.clear();
    for (int u = 0; u < sh.ulysses; ++u) {
      SequenceShard peer = sh;
      peer.ulysses_rank = u;
      for (int p : shard_positions(T, peer)) lse_tokens.push_back(p);
    }
    lse_heads = H / sh.ulysses;
    first_head = sh.ulysses_rank * lse_heads;
  }
  const int Tlse = int(lse_tokens.size());
  EXPECT_EQ(size_t(B) * lse_heads * Tlse, lse_l.size());
  std::vector<float> lse_want(lse_l.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < lse_heads; ++h)
      for (int i = 0; i < Tlse; ++i)
        lse_want[(size_t(b) * lse_heads + h) * Tlse + i] =
            lse[(size_t(b) * H + first_head + h) * T + lse_tokens[i]];

  return {rel_error(out_l, rows(out, int64_t(H) * D)), rel_error(lse_l, lse_want),
          rel_error(dqkv_l, rows(dqkv, W))};
}

std::vector<Case> cases(int P) {
  // 19-token zigzag chunks up to P = 4 (T = 152); T grows with P beyond (P = 8 runs by hand).
  const int unit = 2 * std::max(P, 4);
  std::vector<Case> out;
  for (const Layout& l : sp_test::layouts(P)) {
    std::vector<Heads> heads;
    if (l.U == 1)
      heads = {{5, 5}, {6, 2}};  // the ring has no head constraint: odd heads, GQA
    else
      heads = {{4, 4}, {8, 8}, {8, 2}, {8, 4}};  // Hkv = 2 on 4 Ulysses ranks: KV replicated
    for (const Heads& h : heads) {
      if (h.H % l.U) continue;
      out.push_back({l, h, 3, 19 * unit});
    }
    Case big{l, l.U == 1 ? Heads{5, 5} : 4 % l.U == 0 ? Heads{4, 4} : Heads{8, 8}};
    big.T = 65 * unit;  // several kernel blocks per chunk; ragged 65-token zigzag chunks at R = 4
    big.progress_rows = 256;
    out.push_back(big);
  }
  return out;
}

// The largest of a value over all ranks.
double max_over_ranks(double x) {
  std::vector<float> all(size_t(world().size()));
  const float mine = float(x);
  world().all_gather(&mine, all.data(), 1, DType::f32);
  return *std::max_element(all.begin(), all.end());
}

TEST(SpAttention, MatchesSingleProcessKernel) {
  const int P = world().size();
  for (const Case& c : cases(P)) {
    SCOPED_TRACE(fmt::format("{} H={} Hkv={} T={}", c.layout.name(), c.heads.H, c.heads.Hkv, c.T));
    const Errors e = run_case(c);
    EXPECT_LE(e.out, 2e-6);
    EXPECT_LE(e.lse, 2e-6);
    EXPECT_LE(e.dqkv, 1e-5);
    if (c.layout.R == 1 && c.heads.Hkv >= c.layout.U) {
      EXPECT_EQ(e.out, 0.0);  // Ulysses runs the same kernel on the same rows: bitwise equal
      EXPECT_EQ(e.lse, 0.0);
    }
    const Errors worst{max_over_ranks(e.out), max_over_ranks(e.lse), max_over_ranks(e.dqkv)};
    if (world().rank() == 0)
      std::printf("  %-18s H=%d Hkv=%d T=%-4d  max over ranks: out %.1e  lse %.1e  dqkv %.1e\n",
                  c.layout.name().c_str(), c.heads.H, c.heads.Hkv, c.T, worst.out, worst.lse, worst.dqkv);
  }
}

// The bytes every rank moves per layer, from CommStats, against the spec's formulas written in its
// terms: N tokens per row, h = H D, h_kv' = U Hkv_l D (h_kv, or U D when KV heads are replicated).
TEST(SpAttention, BytesMatchTheSpecFormulas) {
  const int P = world().size();
  for (const Case& c : cases(P)) {
    SCOPED_TRACE(fmt::format("{} H={} Hkv={} T={}", c.layout.name(), c.heads.H, c.heads.Hkv, c.T));
    Bytes got;
    run_case(c, &got);
    const uint64_t U = c.layout.U, R = c.layout.R, B = c.B, N = c.T, D = c.D, H = c.heads.H,
                   Hkv = c.heads.Hkv;
    const uint64_t h = H * D, hkv = U * (Hkv >= U ? Hkv / U : 1) * D, f32 = 4;
    // Ulysses: (U-1)/U of (2h + 2h_kv') per token of the N/(U R) local tokens, each way.
    const uint64_t ulysses = (U - 1) * B * (N / (U * R)) * (2 * h + 2 * hkv) * f32 / U;
    // Ring over R with N/R tokens of H/U heads: K, V forward (R-1 hops); K, V (R-1) + dK, dV (R hops)
    // back.
    const uint64_t block = B * (N / R) * 2 * (hkv / U) * f32;
    EXPECT_EQ(got.a2a_fwd, ulysses);
    EXPECT_EQ(got.a2a_bwd, ulysses);
    EXPECT_EQ(got.p2p_fwd, (R - 1) * block);
    EXPECT_EQ(got.p2p_bwd, R > 1 ? (2 * R - 1) * block : 0);  // one rank: no ring
    if (world().rank() == 0 && c.T == 65 * 2 * std::max(P, 4))
      std::printf("  %-18s H=%llu T=%llu bytes/rank/layer: fwd a2a %llu p2p %llu, bwd a2a %llu p2p %llu\n",
                  c.layout.name().c_str(), (unsigned long long)H, (unsigned long long)N,
                  (unsigned long long)got.a2a_fwd, (unsigned long long)got.p2p_fwd,
                  (unsigned long long)got.a2a_bwd, (unsigned long long)got.p2p_bwd);
  }
}

// Ulysses over all P ranks with T = T0 * P: the all-to-all buffers per rank (what the spec's
// 4Nh/P counts) are the same at every P; the bus bytes are that times (P-1)/P.
TEST(SpAttention, UlyssesVolumePerRankIsConstantWhenTAndPGrowTogether) {
  const int P = world().size();
  Case c{{P, 1, RingLayout::zigzag}, {8, 8}};
  c.T = 64 * P;
  Bytes got;
  run_case(c, &got);
  const uint64_t B = c.B, h = uint64_t(c.heads.H) * c.D, T0 = 64, f32 = 4;
  const uint64_t buffers = 2 * B * T0 * 4 * h * f32;  // qkv + out forward, dout + dqkv backward
  EXPECT_EQ(got.a2a_fwd + got.a2a_bwd, buffers * (P - 1) / P);
  if (world().rank() == 0)
    std::printf(
        "  {\"P\": %d, \"T\": %d, \"a2a_buffer_bytes_per_rank\": %llu, \"bus_bytes_per_rank\": %llu}\n", P,
        c.T, (unsigned long long)buffers, (unsigned long long)(got.a2a_fwd + got.a2a_bwd));
}

TEST(SpAttention, ImpossibleLayoutsAreClearErrors) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([] { UlyssesHeads(5, 5, 2); }).find("n_head (5) divisible by 2"), std::string::npos);
  EXPECT_NE(message([] { UlyssesHeads(12, 3, 2); }).find("n_kv_head (3)"), std::string::npos);
  EXPECT_NE(message([] { UlyssesHeads(8, 2, 3); }), "");
  EXPECT_EQ(message([] { UlyssesHeads(8, 2, 4); }), "");  // replicated x2
  EXPECT_EQ(message([] { UlyssesHeads(8, 2, 2); }), "");
  EXPECT_NE(message([] {
              check_sequence_shard(150, {1, 4, 0, 0, RingLayout::zigzag});
            }).find("2*sp_ring=8"),
            std::string::npos);
  if (world().size() > 1) {
    // Through the op: H = 5 over every rank as Ulysses.
    ProcessGrid grid(world(), {.sp_ulysses = world().size()});
    SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring());
    std::vector<float> qkv(2 * 3 * 5 * 4), out(2 * 5 * 4), lse(2 * 5);
    AttentionSavedPtr saved;
    EXPECT_NE(message([&] {
                op.forward(out.data(), lse.data(), qkv.data(), 1, 2, 5, 4, saved);
              }).find("sp_ulysses"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace odyssey
