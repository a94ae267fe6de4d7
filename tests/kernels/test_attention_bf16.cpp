// The attention kernel under the bf16 policy (attention.h: attention_forward_bf16 /
// attention_backward_bf16), on every path this CPU runs (forced through ODYSSEY_ATTN_ISA):
//   - against a float64 emulation of the policy (spec §9's bf16 emulation, for attention): bf16 inputs,
//     scores scaled after q.k, the online softmax over the kernel's key blocks with P rounded to bf16 as
//     the input of P.V and the row sum over the unrounded P, and in the backward P and dS rounded to bf16
//     as the inputs of their products. The kernel differs from it by fp32 summation order and exp
//     approximation only (and the rare bf16 rounding those flip);
//   - against the fp32 kernel on the same bf16-rounded inputs (spec §9 "kernels" row): lse (fp32) within
//     1e-6 of the tensor's max; out within 1 bf16 ulp of max|v| (P's rounding moves out by at most 2^-9
//     max|v|, its own rounding by half an ulp of out); gradients (fp32, but products of bf16-rounded P and
//     dS) within 1e-2 of each tensor's max;
//   - the contract ring, Ulysses and chunked attention rely on: a bf16 out is the fp32 out rounded once,
//     bitwise; query chunks with offsets give the same bits as one call; key halves merged by their LSE
//     give one call's out; bitwise the same at any thread count and backward schedule.
// Tolerances against the emulation: lse 1e-6 relative, out 2e-5 and gradients 1e-4 of the tensor's max
// (observed on the AVX2 and portable paths: lse 1.1e-7, out 1.9e-7, gradients 2e-5 where one rounding of
// P flipped, else below 1.4e-6). Against the fp32 kernel, observed: out 2.8e-3 (bound 3.9e-3), gradients
// 2.4e-3.
// Shapes are odd on purpose (D = 5, 40, 80; T not a multiple of the 48-row blocks; GQA; offsets; rows that
// see no key).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "odyssey/core/bf16.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/attention_tiles.h"
#include "odyssey/kernels/cpu_info.h"

namespace odyssey {
namespace {

// The key block of the fast kernel's online softmax (every path's MicroTiles): the emulation rounds P
// against the same running maxima.
constexpr int kBlockK = attention_tiles::MicroTiles<4, 2>::kBlockK;
static_assert(attention_tiles::MicroTiles<8, 2>::kBlockK == kBlockK &&
              attention_tiles::MicroTiles<16, 4>::kBlockK == kBlockK);
constexpr double kInf = std::numeric_limits<double>::infinity();

// A [B, T, heads, D] activation with padded rows, in bf16, and the same values widened to fp32 with the
// same strides (for the fp32 kernel).
struct Act {
  int B, T, heads, D;
  int64_t row_stride, batch_stride;
  std::vector<bf16> b;
  std::vector<float> f;
  Act(int B_, int T_, int heads_, int D_, int pad, std::mt19937& gen)
      : B(B_),
        T(T_),
        heads(heads_),
        D(D_),
        row_stride(int64_t{heads_} * D_ + pad),
        batch_stride(int64_t{T_} * row_stride + 3),
        b(size_t(B_) * batch_stride + 8),
        f(b.size()) {
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    for (size_t i = 0; i < b.size(); ++i) {
      b[i] = to_bf16(uni(gen));
      f[i] = bf16_to_float(b[i]);
    }
  }
  size_t at(int bi, int t, int h, int c) const {
    return size_t(bi * batch_stride + t * row_stride + h * D + c);
  }
  double operator()(int bi, int t, int h, int c) const { return bf16_to_float(b[at(bi, t, h, c)]); }
  Bf16HeadsView view() const { return {b.data(), batch_stride, row_stride}; }
  MutBf16HeadsView mut() { return {b.data(), batch_stride, row_stride}; }
  HeadsView fview() const { return {f.data(), batch_stride, row_stride}; }
  MutHeadsView fmut() { return {f.data(), batch_stride, row_stride}; }
};

// An fp32 [B, T, heads, D] output or gradient, dense.
struct Out32 {
  int B, T, heads, D;
  std::vector<float> x;
  Out32(int B_, int T_, int heads_, int D_, float fill = 0.0f)
      : B(B_), T(T_), heads(heads_), D(D_), x(size_t(B_) * T_ * heads_ * D_, fill) {}
  float& operator()(int b, int t, int h, int c) { return x[((size_t(b) * T + t) * heads + h) * D + c]; }
  MutHeadsView mut() { return {x.data(), int64_t{T} * heads * D, int64_t{heads} * D}; }
  HeadsView view() const { return {x.data(), int64_t{T} * heads * D, int64_t{heads} * D}; }
  double max_abs() const {
    double m = 0;
    for (float v : x) m = std::max(m, double(std::fabs(v)));
    return m;
  }
};

struct Problem {
  AttentionDims d;
  AttentionMask mask;
  float scale;
  Act q, k, v, dout;
};

Problem make(AttentionDims d, AttentionMask mask, uint32_t seed) {
  std::mt19937 gen(seed);
  Act q(d.B, d.Tq, d.H, d.D, 3, gen), k(d.B, d.Tk, d.Hkv, d.D, 1, gen), v(d.B, d.Tk, d.Hkv, d.D, 0, gen),
      dout(d.B, d.Tq, d.H, d.D, 2, gen);
  return {d, mask, 1.0f / std::sqrt(float(d.D)), q, k, v, dout};
}

bool visible(const Problem& p, int i, int j) {
  return p.mask.kind == MaskKind::none || p.mask.k_start + j <= p.mask.q_start + i;
}

double score(const Problem& p, int b, int h, int i, int j) {
  const int hk = h / (p.d.H / p.d.Hkv);
  double dot = 0;
  for (int c = 0; c < p.d.D; ++c) dot += p.q(b, i, h, c) * p.k(b, j, hk, c);
  return double(p.scale) * dot;
}

double round_p(double p) {
  return round_to_bf16(float(p));
}

// The policy's forward in float64 (see the file comment): out [B, Tq, H, D] and lse [B, H, Tq].
void emulate_forward(const Problem& p, Out32& out, std::vector<double>& lse) {
  const auto& d = p.d;
  lse.assign(size_t(d.B) * d.H * d.Tq, 0);
  std::vector<double> o(d.D);
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h)
      for (int i = 0; i < d.Tq; ++i) {
        const int hk = h / (d.H / d.Hkv);
        double m = -kInf, l = 0;
        std::fill(o.begin(), o.end(), 0.0);
        for (int j0 = 0; j0 < d.Tk; j0 += kBlockK) {
          const int j1 = std::min(d.Tk, j0 + kBlockK);
          std::vector<double> s(j1 - j0, -kInf);
          double block_max = -kInf;
          for (int j = j0; j < j1; ++j)
            if (visible(p, i, j)) block_max = std::max(block_max, s[j - j0] = score(p, b, h, i, j));
          const double m_new = std::max(m, block_max);
          if (m_new == -kInf) continue;
          const double alpha = m == m_new ? 1.0 : std::exp(m - m_new);
          l *= alpha;
          for (double& x : o) x *= alpha;
          for (int j = j0; j < j1; ++j) {
            const double e = std::exp(s[j - j0] - m_new);
            l += e;
            for (int c = 0; c < d.D; ++c) o[c] += round_p(e) * p.v(b, j, hk, c);
          }
          m = m_new;
        }
        for (int c = 0; c < d.D; ++c) out(b, i, h, c) = float(l > 0 ? o[c] / l : 0.0);
        lse[(size_t(b) * d.H + h) * d.Tq + i] = l > 0 ? m + std::log(l) : -kInf;
      }
}

// The policy's backward in float64 with the kernel's lse and bf16 out: dq, dk, dv (dense, from zero).
void emulate_backward(const Problem& p, const Act& out, const std::vector<float>& lse, Out32& dq, Out32& dk,
                      Out32& dv) {
  const auto& d = p.d;
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h) {
      const int hk = h / (d.H / d.Hkv);
      for (int i = 0; i < d.Tq; ++i) {
        const double li = lse[(size_t(b) * d.H + h) * d.Tq + i];
        if (li == -kInf) continue;
        double delta = 0;
        for (int c = 0; c < d.D; ++c) delta += out(b, i, h, c) * p.dout(b, i, h, c);
        for (int j = 0; j < d.Tk; ++j) {
          if (!visible(p, i, j)) continue;
          const double e = std::exp(score(p, b, h, i, j) - li);
          double dp = 0;
          for (int c = 0; c < d.D; ++c) dp += p.dout(b, i, h, c) * p.v(b, j, hk, c);
          const double pb = round_p(e), ds = round_p(e * (dp - delta));
          for (int c = 0; c < d.D; ++c) {
            dv(b, j, hk, c) += float(pb * p.dout(b, i, h, c));
            dq(b, i, h, c) += float(p.scale * ds * p.k(b, j, hk, c));
            dk(b, j, hk, c) += float(p.scale * ds * p.q(b, i, h, c));
          }
        }
      }
    }
}

// max |a - b| / max |b| over the tensor.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(b[i])));
  }
  return ref > 0 ? err / ref : err;
}

// Runs `body` once per path this CPU supports, with ODYSSEY_ATTN_ISA naming it.
template <class Body>
void for_each_path(Body body) {
  const char* before = std::getenv("ODYSSEY_ATTN_ISA");
  const std::string saved = before ? before : "";
  for (const std::string& isa : attention_isas_supported()) {
    setenv("ODYSSEY_ATTN_ISA", isa.c_str(), 1);
    SCOPED_TRACE("path " + isa);
    body(isa);
  }
  if (before)
    setenv("ODYSSEY_ATTN_ISA", saved.c_str(), 1);
  else
    unsetenv("ODYSSEY_ATTN_ISA");
}

struct Shape {
  AttentionDims d;
  AttentionMask mask;
};
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {{1, 1, 1, 1, 1, 5}, {MaskKind::causal, 0, 0}},       {{2, 50, 50, 2, 2, 40}, {MaskKind::causal, 0, 0}},
      {{1, 97, 97, 4, 2, 80}, {MaskKind::causal, 0, 0}},     // GQA
      {{2, 37, 61, 3, 1, 64}, {MaskKind::none, 0, 0}},       // multi-query, no mask
      {{1, 53, 70, 2, 2, 128}, {MaskKind::causal, 40, 30}},  // offsets (a later query chunk)
      {{1, 20, 30, 2, 1, 16}, {MaskKind::causal, 0, 10}},    // the first 10 rows see no key
  };
  return s;
}

TEST(AttentionBf16, ForwardMatchesTheFloat64Emulation) {
  for_each_path([](const std::string&) {
    uint32_t seed = 10;
    for (const Shape& s : shapes()) {
      Problem p = make(s.d, s.mask, ++seed);
      Out32 out(s.d.B, s.d.Tq, s.d.H, s.d.D, 7.0f), want(s.d.B, s.d.Tq, s.d.H, s.d.D);
      std::vector<float> lse(size_t(s.d.B) * s.d.H * s.d.Tq, 7.0f);
      std::vector<double> want_lse;
      attention_forward_bf16(out.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), s.d, s.mask, p.scale);
      emulate_forward(p, want, want_lse);
      double lse_err = 0;
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(want_lse[i])) {
          EXPECT_EQ(lse[i], -std::numeric_limits<float>::infinity());
          continue;
        }
        lse_err = std::max(lse_err, std::fabs(lse[i] - want_lse[i]) / std::max(1.0, std::fabs(want_lse[i])));
      }
      EXPECT_LE(lse_err, 1e-6) << "D=" << s.d.D << " Tq=" << s.d.Tq;
      EXPECT_LE(rel_err(out.x, want.x), 2e-5) << "D=" << s.d.D << " Tq=" << s.d.Tq;
      std::printf("  D=%d Tq=%d Tk=%d: vs emulation lse %.2e out %.2e\n", s.d.D, s.d.Tq, s.d.Tk, lse_err,
                  rel_err(out.x, want.x));
    }
  });
}

TEST(AttentionBf16, BackwardMatchesTheFloat64Emulation) {
  for_each_path([](const std::string&) {
    uint32_t seed = 20;
    for (const Shape& s : shapes()) {
      Problem p = make(s.d, s.mask, ++seed);
      std::mt19937 gen(seed);
      Act out(s.d.B, s.d.Tq, s.d.H, s.d.D, 1, gen);
      std::vector<float> lse(size_t(s.d.B) * s.d.H * s.d.Tq);
      attention_forward_bf16(out.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), s.d, s.mask, p.scale);
      Out32 dq(s.d.B, s.d.Tq, s.d.H, s.d.D), dk(s.d.B, s.d.Tk, s.d.Hkv, s.d.D),
          dv(s.d.B, s.d.Tk, s.d.Hkv, s.d.D);
      Out32 wq = dq, wk = dk, wv = dv;
      attention_backward_bf16(dq.mut(), dk.mut(), dv.mut(), p.dout.view(), out.view(), lse.data(), p.q.view(),
                              p.k.view(), p.v.view(), s.d, s.mask, p.scale);
      emulate_backward(p, out, lse, wq, wk, wv);
      EXPECT_LE(rel_err(dq.x, wq.x), 1e-4) << "dq D=" << s.d.D << " Tq=" << s.d.Tq;
      EXPECT_LE(rel_err(dk.x, wk.x), 1e-4) << "dk D=" << s.d.D << " Tq=" << s.d.Tq;
      EXPECT_LE(rel_err(dv.x, wv.x), 1e-4) << "dv D=" << s.d.D << " Tq=" << s.d.Tq;
      std::printf("  D=%d Tq=%d Tk=%d: vs emulation dq %.2e dk %.2e dv %.2e\n", s.d.D, s.d.Tq, s.d.Tk,
                  rel_err(dq.x, wq.x), rel_err(dk.x, wk.x), rel_err(dv.x, wv.x));
    }
  });
}

TEST(AttentionBf16, AgainstTheFp32KernelOnTheSameRoundedInputs) {
  for_each_path([](const std::string&) {
    uint32_t seed = 30;
    for (const Shape& s : shapes()) {
      Problem p = make(s.d, s.mask, ++seed);
      std::mt19937 gen(seed);
      Act out(s.d.B, s.d.Tq, s.d.H, s.d.D, 1, gen);
      Out32 out32(s.d.B, s.d.Tq, s.d.H, s.d.D);
      std::vector<float> lse(size_t(s.d.B) * s.d.H * s.d.Tq), lse32(lse.size());
      attention_forward_bf16(out.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), s.d, s.mask, p.scale);
      attention_forward(out32.mut(), lse32.data(), p.q.fview(), p.k.fview(), p.v.fview(), s.d, s.mask,
                        p.scale);
      double lse_err = 0, lse_max = 0, out_err = 0, v_max = 0;
      for (size_t i = 0; i < lse.size(); ++i) {
        if (std::isinf(lse32[i])) {
          EXPECT_EQ(lse[i], lse32[i]);
          continue;
        }
        lse_err = std::max(lse_err, double(std::fabs(lse[i] - lse32[i])));
        lse_max = std::max(lse_max, double(std::fabs(lse32[i])));
      }
      for (float x : p.v.f) v_max = std::max(v_max, double(std::fabs(x)));
      for (int b = 0; b < s.d.B; ++b)
        for (int t = 0; t < s.d.Tq; ++t)
          for (int h = 0; h < s.d.H; ++h)
            for (int c = 0; c < s.d.D; ++c)
              out_err = std::max(out_err, std::fabs(out(b, t, h, c) - double(out32(b, t, h, c))));
      EXPECT_LE(lse_err, 1e-6 * std::max(1.0, lse_max)) << "D=" << s.d.D;
      EXPECT_LE(out_err, std::ldexp(v_max, -8)) << "D=" << s.d.D;  // 1 bf16 ulp of max |v|
      // Backward from the same (bf16) out, lse and dout.
      Out32 dq(s.d.B, s.d.Tq, s.d.H, s.d.D), dk(s.d.B, s.d.Tk, s.d.Hkv, s.d.D),
          dv(s.d.B, s.d.Tk, s.d.Hkv, s.d.D);
      Out32 fq = dq, fk = dk, fv = dv, out_w(s.d.B, s.d.Tq, s.d.H, s.d.D);
      for (int b = 0; b < s.d.B; ++b)
        for (int t = 0; t < s.d.Tq; ++t)
          for (int h = 0; h < s.d.H; ++h)
            for (int c = 0; c < s.d.D; ++c) out_w(b, t, h, c) = float(out(b, t, h, c));
      attention_backward_bf16(dq.mut(), dk.mut(), dv.mut(), p.dout.view(), out.view(), lse.data(), p.q.view(),
                              p.k.view(), p.v.view(), s.d, s.mask, p.scale);
      attention_backward(fq.mut(), fk.mut(), fv.mut(), p.dout.fview(), out_w.view(), lse.data(), p.q.fview(),
                         p.k.fview(), p.v.fview(), s.d, s.mask, p.scale);
      EXPECT_LE(rel_err(dq.x, fq.x), 1e-2) << "dq D=" << s.d.D;
      EXPECT_LE(rel_err(dk.x, fk.x), 1e-2) << "dk D=" << s.d.D;
      EXPECT_LE(rel_err(dv.x, fv.x), 1e-2) << "dv D=" << s.d.D;
      std::printf(
          "  D=%d Tq=%d Tk=%d: vs fp32 kernel lse %.2e out %.2e (max|v| %.2f) dq %.2e dk %.2e dv %.2e\n",
          s.d.D, s.d.Tq, s.d.Tk, lse_err, out_err, v_max, rel_err(dq.x, fq.x), rel_err(dk.x, fk.x),
          rel_err(dv.x, fv.x));
    }
  });
}

TEST(AttentionBf16, Bf16OutIsTheFp32OutRoundedOnce) {
  for_each_path([](const std::string&) {
    for (const Shape& s : shapes()) {
      Problem p = make(s.d, s.mask, 40);
      std::mt19937 gen(1);
      Act out(s.d.B, s.d.Tq, s.d.H, s.d.D, 2, gen);
      Out32 out32(s.d.B, s.d.Tq, s.d.H, s.d.D);
      std::vector<float> lse(size_t(s.d.B) * s.d.H * s.d.Tq), lse32(lse.size());
      attention_forward_bf16(out.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), s.d, s.mask, p.scale);
      attention_forward_bf16(out32.mut(), lse32.data(), p.q.view(), p.k.view(), p.v.view(), s.d, s.mask,
                             p.scale);
      EXPECT_EQ(lse, lse32);
      int differ = 0;
      for (int b = 0; b < s.d.B; ++b)
        for (int t = 0; t < s.d.Tq; ++t)
          for (int h = 0; h < s.d.H; ++h)
            for (int c = 0; c < s.d.D; ++c) differ += out.b[out.at(b, t, h, c)] != to_bf16(out32(b, t, h, c));
      EXPECT_EQ(differ, 0);
    }
  });
}

// Chunked attention: query rows [48, 100) against their key prefix [0, 100) with q_start = 48 give the
// bits of rows [48, 100) of one call (the chunk starts on a query block, as the block runner's do).
TEST(AttentionBf16, QueryChunkEqualsOneCall) {
  for_each_path([](const std::string&) {
    const AttentionDims d{2, 100, 100, 4, 2, 64};
    Problem p = make(d, {MaskKind::causal, 0, 0}, 50);
    Out32 whole(d.B, d.Tq, d.H, d.D), chunk(d.B, 52, d.H, d.D);
    std::vector<float> lse(size_t(d.B) * d.H * d.Tq), lse_chunk(size_t(d.B) * d.H * 52);
    attention_forward_bf16(whole.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), d, {}, p.scale);
    Bf16HeadsView q_rest = p.q.view();
    q_rest.data += 48 * q_rest.row_stride;
    attention_forward_bf16(chunk.mut(), lse_chunk.data(), q_rest, p.k.view(), p.v.view(),
                           {d.B, 52, 100, d.H, d.Hkv, d.D}, {MaskKind::causal, 48, 0}, p.scale);
    int differ = 0;
    for (int b = 0; b < d.B; ++b)
      for (int t = 0; t < 52; ++t)
        for (int h = 0; h < d.H; ++h) {
          differ += lse_chunk[(size_t(b) * d.H + h) * 52 + t] != lse[(size_t(b) * d.H + h) * d.Tq + 48 + t];
          for (int c = 0; c < d.D; ++c) differ += chunk(b, t, h, c) != whole(b, 48 + t, h, c);
        }
    EXPECT_EQ(differ, 0);
  });
}

// Ring attention: two key halves (the second with k_start = 50), fp32 outs merged by their LSE, against
// one call: within 1 bf16 ulp of max |v| (P is rounded against each half's running max).
TEST(AttentionBf16, KeyHalvesMergedByLseEqualOneCall) {
  for_each_path([](const std::string&) {
    const AttentionDims d{1, 70, 100, 2, 2, 40}, half{1, 70, 50, 2, 2, 40};
    Problem p = make(d, {MaskKind::causal, 30, 0}, 60);
    Out32 whole(1, 70, 2, 40), a(1, 70, 2, 40), b(1, 70, 2, 40);
    std::vector<float> lse(2 * 70), la(lse.size()), lb(lse.size());
    attention_forward_bf16(whole.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), d,
                           {MaskKind::causal, 30, 0}, p.scale);
    Bf16HeadsView k2 = p.k.view(), v2 = p.v.view();
    k2.data += 50 * k2.row_stride;
    v2.data += 50 * v2.row_stride;
    attention_forward_bf16(a.mut(), la.data(), p.q.view(), p.k.view(), p.v.view(), half,
                           {MaskKind::causal, 30, 0}, p.scale);
    attention_forward_bf16(b.mut(), lb.data(), p.q.view(), k2, v2, half, {MaskKind::causal, 30, 50}, p.scale);
    double err = 0, lse_err = 0, v_max = 0;
    for (float x : p.v.f) v_max = std::max(v_max, double(std::fabs(x)));
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 70; ++t) {
        const size_t r = size_t(h) * 70 + t;
        const double m = std::max(la[r], lb[r]);
        const double wa = m == -kInf ? 0 : std::exp(la[r] - m), wb = m == -kInf ? 0 : std::exp(lb[r] - m);
        const double merged_lse = m + std::log(wa + wb);
        lse_err = std::max(lse_err, std::fabs(merged_lse - lse[r]));
        for (int c = 0; c < 40; ++c) {
          const double o = (wa * a(0, t, h, c) + wb * b(0, t, h, c)) / (wa + wb);
          err = std::max(err, std::fabs(o - whole(0, t, h, c)));
        }
      }
    EXPECT_LE(lse_err, 1e-5);
    EXPECT_LE(err, std::ldexp(v_max, -8));
  });
}

// Bitwise at 1 and 2 threads, and for both backward schedules.
TEST(AttentionBf16, BitwiseAcrossThreadsAndSchedules) {
  for_each_path([](const std::string&) {
    const AttentionDims d{2, 130, 130, 4, 2, 64};
    Problem p = make(d, {}, 70);
    std::mt19937 gen(2);
    Act out(d.B, d.Tq, d.H, d.D, 0, gen);
    std::vector<float> lse(size_t(d.B) * d.H * d.Tq);
    std::vector<std::vector<float>> runs;
    const int threads = omp_get_max_threads();
    for (const char* schedule : {"fused", "split"})
      for (int t : {1, 2}) {
        omp_set_num_threads(t);
        setenv("ODYSSEY_ATTN_BWD", schedule, 1);
        Out32 fwd(d.B, d.Tq, d.H, d.D);
        attention_forward_bf16(fwd.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), d, {}, p.scale);
        for (size_t i = 0; i < out.b.size(); ++i) out.b[i] = {0};
        attention_forward_bf16(out.mut(), lse.data(), p.q.view(), p.k.view(), p.v.view(), d, {}, p.scale);
        Out32 dq(d.B, d.Tq, d.H, d.D, 0.5f), dk(d.B, d.Tk, d.Hkv, d.D, 0.5f), dv(d.B, d.Tk, d.Hkv, d.D, 0.5f);
        attention_backward_bf16(dq.mut(), dk.mut(), dv.mut(), p.dout.view(), out.view(), lse.data(),
                                p.q.view(), p.k.view(), p.v.view(), d, {}, p.scale);
        std::vector<float> all = fwd.x;
        all.insert(all.end(), lse.begin(), lse.end());
        all.insert(all.end(), dq.x.begin(), dq.x.end());
        all.insert(all.end(), dk.x.begin(), dk.x.end());
        all.insert(all.end(), dv.x.begin(), dv.x.end());
        runs.push_back(all);
      }
    unsetenv("ODYSSEY_ATTN_BWD");
    omp_set_num_threads(threads);
    for (size_t r = 1; r < runs.size(); ++r) EXPECT_TRUE(runs[r] == runs[0]) << "run " << r;
  });
}

// Runs `body` with ODYSSEY_ATTN_ISA = isa, restoring the variable after.
template <class Body>
void with_path(const char* isa, Body body) {
  const char* before = std::getenv("ODYSSEY_ATTN_ISA");
  const std::string saved = before ? before : "";
  setenv("ODYSSEY_ATTN_ISA", isa, 1);
  body();
  if (before)
    setenv("ODYSSEY_ATTN_ISA", saved.c_str(), 1);
  else
    unsetenv("ODYSSEY_ATTN_ISA");
}

// The AVX512_BF16 path (bf16 dot products) against the emulation on the same bf16 inputs: the avx512
// path's bf16 entries, the same schedule and 16-float tiles on fp32 products of the widened values.
// Products of bf16 values are exact in fp32, so the two differ by summation order only (VDPBF16PS adds
// a pair's two products at once) and the rare rounding of P or dS that order flips (one element of P
// moved by one bf16 ulp moves out by up to 2^-8 of max |v|). So: lse within 1e-6 relative; every
// element of out and the gradients within 2e-6 of the tensor's max but for at most 1% of them (the
// flips: one moves a row), and those within 2^-8 of it. Observed: lse 1.2e-7; out and gradients 4e-7
// without a flip; with flips (T = 131, GQA 3:1, offsets: 0.15% of out's elements) out 8e-5, gradients
// 2e-5. Also D = 288 (the products' reduction in two chunks).
TEST(AttentionBf16, DotProductPathMatchesTheEmulation) {
  const std::vector<std::string> paths = attention_isas_supported();
  if (std::find(paths.begin(), paths.end(), "avx512_bf16") == paths.end())
    GTEST_SKIP() << "this CPU (" << cpu_info().model << ") has no AVX512_BF16: no dot-product path to test";
  std::vector<Shape> cases = shapes();
  cases.push_back({{1, 29, 29, 2, 1, 288}, {MaskKind::causal, 0, 0}});
  cases.push_back({{2, 131, 150, 6, 2, 64}, {MaskKind::causal, 19, 0}});
  uint32_t seed = 80;
  for (const Shape& s : cases) {
    const AttentionDims& d = s.d;
    Problem p = make(d, s.mask, ++seed);
    struct Run {
      Out32 out, dq, dk, dv;
      std::vector<float> lse;
    };
    auto run = [&](const char* isa) {
      Run r{Out32(d.B, d.Tq, d.H, d.D), Out32(d.B, d.Tq, d.H, d.D), Out32(d.B, d.Tk, d.Hkv, d.D),
            Out32(d.B, d.Tk, d.Hkv, d.D), std::vector<float>(size_t(d.B) * d.H * d.Tq)};
      with_path(isa, [&] {
        EXPECT_EQ(std::string(attention_isa()), isa);
        attention_forward_bf16(r.out.mut(), r.lse.data(), p.q.view(), p.k.view(), p.v.view(), d, s.mask,
                               p.scale);
      });
      return r;
    };
    Run dot = run("avx512_bf16"), emu = run("avx512");
    // Backward from the same bf16 out and lse (the emulation's), so only the backward's order differs.
    std::mt19937 gen(seed);
    Act out(d.B, d.Tq, d.H, d.D, 1, gen);
    for (int b = 0; b < d.B; ++b)
      for (int t = 0; t < d.Tq; ++t)
        for (int h = 0; h < d.H; ++h)
          for (int c = 0; c < d.D; ++c) out.b[out.at(b, t, h, c)] = to_bf16(emu.out(b, t, h, c));
    for (Run* r : {&dot, &emu})
      with_path(r == &dot ? "avx512_bf16" : "avx512", [&] {
        attention_backward_bf16(r->dq.mut(), r->dk.mut(), r->dv.mut(), p.dout.view(), out.view(),
                                emu.lse.data(), p.q.view(), p.k.view(), p.v.view(), d, s.mask, p.scale);
      });
    double lse_err = 0;
    for (size_t i = 0; i < dot.lse.size(); ++i) {
      if (std::isinf(emu.lse[i])) {
        EXPECT_EQ(dot.lse[i], emu.lse[i]);
        continue;
      }
      lse_err = std::max(lse_err,
                         double(std::fabs(dot.lse[i] - emu.lse[i])) / std::max(1.0f, std::fabs(emu.lse[i])));
    }
    EXPECT_LE(lse_err, 1e-6) << "D=" << d.D << " Tq=" << d.Tq;
    double flipped = 0;
    for (auto [a, b, name] : {std::tuple{&dot.out, &emu.out, "out"}, std::tuple{&dot.dq, &emu.dq, "dq"},
                              std::tuple{&dot.dk, &emu.dk, "dk"}, std::tuple{&dot.dv, &emu.dv, "dv"}}) {
      const double ref = b->max_abs();
      size_t beyond = 0;
      for (size_t i = 0; i < a->x.size(); ++i) beyond += std::fabs(a->x[i] - b->x[i]) > 2e-6 * ref;
      EXPECT_LE(double(beyond), 1e-2 * double(a->x.size())) << name << " D=" << d.D << " Tq=" << d.Tq;
      EXPECT_LE(rel_err(a->x, b->x), std::ldexp(1.0, -8)) << name << " D=" << d.D << " Tq=" << d.Tq;
      flipped = std::max(flipped, double(beyond) / double(a->x.size()));
    }
    std::printf(
        "  D=%d Tq=%d Tk=%d H=%d Hkv=%d: dot products vs emulation lse %.2e out %.2e dq %.2e dk %.2e "
        "dv %.2e (beyond 2e-6: %.3f%%)\n",
        d.D, d.Tq, d.Tk, d.H, d.Hkv, lse_err, rel_err(dot.out.x, emu.out.x), rel_err(dot.dq.x, emu.dq.x),
        rel_err(dot.dk.x, emu.dk.x), rel_err(dot.dv.x, emu.dv.x), 100 * flipped);
  }
}

// The fp32-view entries (what the model's attention ops call under train.precision = bf16) round every
// value as they read it: on fp32 values that are not bf16 values they give the bits of the bf16 views
// of the rounded values, forward and backward, on every path.
TEST(AttentionBf16, Fp32ViewsAreRoundedAsRead) {
  for_each_path([](const std::string&) {
    const AttentionDims d{2, 61, 75, 4, 2, 40};
    const AttentionMask mask{MaskKind::causal, 14, 0};
    Problem p = make(d, mask, 90);
    // fp32 values near the bf16 ones but not bf16 values: each rounds back to its bf16.
    auto unrounded = [](Act& a) {
      for (size_t i = 0; i < a.b.size(); ++i) a.f[i] = bf16_to_float(a.b[i]) * (1.0f + 0x1p-12f);
    };
    for (Act* a : {&p.q, &p.k, &p.v, &p.dout}) unrounded(*a);
    std::mt19937 gen(3);
    Act out(d.B, d.Tq, d.H, d.D, 2, gen);
    unrounded(out);
    Out32 o_b(d.B, d.Tq, d.H, d.D), o_f(d.B, d.Tq, d.H, d.D);
    std::vector<float> lse_b(size_t(d.B) * d.H * d.Tq), lse_f(lse_b.size());
    attention_forward_bf16(o_b.mut(), lse_b.data(), p.q.view(), p.k.view(), p.v.view(), d, mask, p.scale);
    attention_forward(true, o_f.mut(), lse_f.data(), p.q.fview(), p.k.fview(), p.v.fview(), d, mask, p.scale);
    EXPECT_EQ(o_b.x, o_f.x);
    EXPECT_EQ(lse_b, lse_f);
    Out32 dq_b(d.B, d.Tq, d.H, d.D, 0.25f), dk_b(d.B, d.Tk, d.Hkv, d.D, 0.25f),
        dv_b(d.B, d.Tk, d.Hkv, d.D, 0.25f);
    Out32 dq_f = dq_b, dk_f = dk_b, dv_f = dv_b;
    attention_backward_bf16(dq_b.mut(), dk_b.mut(), dv_b.mut(), p.dout.view(), out.view(), lse_b.data(),
                            p.q.view(), p.k.view(), p.v.view(), d, mask, p.scale);
    attention_backward(true, dq_f.mut(), dk_f.mut(), dv_f.mut(), p.dout.fview(), out.fview(), lse_b.data(),
                       p.q.fview(), p.k.fview(), p.v.fview(), d, mask, p.scale);
    EXPECT_EQ(dq_b.x, dq_f.x);
    EXPECT_EQ(dk_b.x, dk_f.x);
    EXPECT_EQ(dv_b.x, dv_f.x);
    // bf16 = false is the fp32 kernel, bitwise.
    Out32 o32(d.B, d.Tq, d.H, d.D), o32_sel(d.B, d.Tq, d.H, d.D);
    attention_forward(o32.mut(), lse_b.data(), p.q.fview(), p.k.fview(), p.v.fview(), d, mask, p.scale);
    attention_forward(false, o32_sel.mut(), lse_f.data(), p.q.fview(), p.k.fview(), p.v.fview(), d, mask,
                      p.scale);
    EXPECT_EQ(o32.x, o32_sel.x);
    EXPECT_EQ(lse_b, lse_f);
  });
}

}  // namespace
}  // namespace odyssey
