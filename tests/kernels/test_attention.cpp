// Blockwise attention against a naive double-precision softmax attention (forward: out and lse;
// backward: its analytic gradients, themselves checked against finite differences) and against the
// reference kernel (attention_reference.h), plus the properties ring and chunked attention rely on:
// partial results over key blocks merge exactly by LSE, the backward of each key block with the final
// out/lse sums to the full backward, and query chunks against their key prefix give the same bits.
//
// Tolerances (inputs uniform in [-1, 1], scale 1/sqrt(D)): out 2e-6 + 2e-5|ref|, lse 1e-5 + 1e-6|ref|,
// gradients 2e-5 + 1e-4|ref| against the double reference; finite differences of the fp32 kernel
// 1e-4 (step 1e-2; observed 7e-6); LSE merge vs one call 1e-5. Observed errors are about 10x below.
#include "odyssey/kernels/attention.h"

#include "odyssey/kernels/attention_reference.h"
#include "odyssey/kernels/attention_workspace.h"
#include "odyssey/kernels/cpu_info.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace odyssey {
namespace {

// ctest runs this suite once per path of the kernel (tests/CMakeLists.txt: ODYSSEY_ATTN_ISA=avx512_bf16,
// avx512, avx2, portable); a path this CPU does not support skips the whole suite.
struct ForcedPathSupported : testing::Environment {
  void SetUp() override {
    const char* forced = std::getenv("ODYSSEY_ATTN_ISA");
    if (!forced || !*forced) return;
    std::vector<std::string> paths = attention_isas_supported();
    if (std::find(paths.begin(), paths.end(), forced) == paths.end())
      GTEST_SKIP() << "ODYSSEY_ATTN_ISA=" << forced << ": not supported by this CPU";
  }
};
const auto* const forced_path_env = testing::AddGlobalTestEnvironment(new ForcedPathSupported);

constexpr double kInf = std::numeric_limits<double>::infinity();

// A [B, T, heads, D] tensor living in a buffer with arbitrary strides (padding between rows and
// batches, or interleaved with other tensors as in a fused qkv buffer).
struct Strided {
  float* data;
  int64_t batch_stride, row_stride;
  int heads, D;
  float& at(int b, int t, int h, int d) const { return data[b * batch_stride + t * row_stride + h * D + d]; }
  HeadsView view() const { return {data, batch_stride, row_stride}; }
  MutHeadsView mut() const { return {data, batch_stride, row_stride}; }
};

struct Problem {
  AttentionDims dims;
  AttentionMask mask;
  float scale;
  std::vector<float> storage;  // q, k, v, dout (R), out, dq, dk, dv
  Strided q, k, v, dout, out, dq, dk, dv;
  std::vector<float> lse;
};

// Separate buffers with padded strides, or (fused) GPT-2's qkv buffer [B, T, 3C] for q, k, v and
// another for dq, dk, dv.
Problem make_problem(AttentionDims d, AttentionMask mask, bool fused = false, uint32_t seed = 1) {
  Problem p{d, mask, 1.0f / std::sqrt(static_cast<float>(d.D)), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto fill = [&](Strided s, int B, int T) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < s.heads; ++h)
          for (int c = 0; c < s.D; ++c) s.at(b, t, h, c) = uni(rng);
  };
  // Offsets of each tensor in one storage vector, so pointers are taken after it is sized.
  std::vector<int64_t> offsets;
  std::vector<Strided> shapes;
  int64_t total = 0;
  auto add = [&](int heads, int64_t row_stride, int64_t batch_stride) {
    offsets.push_back(total);
    shapes.push_back({nullptr, batch_stride, row_stride, heads, d.D});
    total += int64_t{d.B} * batch_stride + 64;
  };
  const int64_t C = int64_t{d.H} * d.D;
  if (fused) {
    EXPECT_EQ(d.Tq, d.Tk);
    EXPECT_EQ(d.H, d.Hkv);
    for (int i = 0; i < 2; ++i) {  // qkv and dqkv [B, T, 3C]
      offsets.push_back(total);
      total += int64_t{d.B} * d.Tq * 3 * C;
    }
    add(d.H, C + 3, int64_t{d.Tq} * (C + 3) + 5);  // dout
    add(d.H, C + 1, int64_t{d.Tq} * (C + 1));      // out
  } else {
    const int64_t Ckv = int64_t{d.Hkv} * d.D;
    add(d.H, C + 3, int64_t{d.Tq} * (C + 3) + 7);        // q
    add(d.Hkv, Ckv + 2, int64_t{d.Tk} * (Ckv + 2) + 1);  // k
    add(d.Hkv, Ckv, int64_t{d.Tk} * Ckv);                // v
    add(d.H, C + 3, int64_t{d.Tq} * (C + 3) + 5);        // dout
    add(d.H, C + 1, int64_t{d.Tq} * (C + 1));            // out
    add(d.H, C, int64_t{d.Tq} * C);                      // dq
    add(d.Hkv, Ckv + 1, int64_t{d.Tk} * (Ckv + 1));      // dk
    add(d.Hkv, Ckv + 5, int64_t{d.Tk} * (Ckv + 5) + 3);  // dv
  }
  p.storage.assign(total, std::nanf(""));  // padding stays NaN: reading it would show
  float* base = p.storage.data();
  if (fused) {
    const int64_t row = 3 * C, batch = int64_t{d.Tq} * 3 * C;
    float* qkv = base + offsets[0];
    float* dqkv = base + offsets[1];
    p.q = {qkv, batch, row, d.H, d.D};
    p.k = {qkv + C, batch, row, d.H, d.D};
    p.v = {qkv + 2 * C, batch, row, d.H, d.D};
    p.dq = {dqkv, batch, row, d.H, d.D};
    p.dk = {dqkv + C, batch, row, d.H, d.D};
    p.dv = {dqkv + 2 * C, batch, row, d.H, d.D};
    p.dout = shapes[0];
    p.dout.data = base + offsets[2];
    p.out = shapes[1];
    p.out.data = base + offsets[3];
  } else {
    Strided* dst[] = {&p.q, &p.k, &p.v, &p.dout, &p.out, &p.dq, &p.dk, &p.dv};
    for (int i = 0; i < 8; ++i) {
      *dst[i] = shapes[i];
      dst[i]->data = base + offsets[i];
    }
  }
  fill(p.q, d.B, d.Tq);
  fill(p.k, d.B, d.Tk);
  fill(p.v, d.B, d.Tk);
  fill(p.dout, d.B, d.Tq);
  fill(p.out, d.B, d.Tq);  // overwritten; not NaN, so that NaN marks padding only
  // Gradients start non-zero: the kernel accumulates.
  fill(p.dq, d.B, d.Tq);
  fill(p.dk, d.B, d.Tk);
  fill(p.dv, d.B, d.Tk);
  p.lse.assign(int64_t{d.B} * d.H * d.Tq, std::nanf(""));
  return p;
}

void forward(Problem& p) {
  attention_forward(p.out.mut(), p.lse.data(), p.q.view(), p.k.view(), p.v.view(), p.dims, p.mask, p.scale);
}
void backward(Problem& p) {
  attention_backward(p.dq.mut(), p.dk.mut(), p.dv.mut(), p.dout.view(), p.out.view(), p.lse.data(),
                     p.q.view(), p.k.view(), p.v.view(), p.dims, p.mask, p.scale);
}

// Dense [B, T, heads, D] doubles.
struct Dense {
  int B, T, heads, D;
  std::vector<double> x;
  Dense(int b, int t, int h, int d) : B(b), T(t), heads(h), D(d), x(size_t(b) * t * h * d, 0.0) {}
  double& at(int b, int t, int h, int c) { return x[((size_t(b) * T + t) * heads + h) * D + c]; }
  static Dense of(const Strided& s, int B, int T) {
    Dense r(B, T, s.heads, s.D);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < s.heads; ++h)
          for (int c = 0; c < s.D; ++c) r.at(b, t, h, c) = s.at(b, t, h, c);
    return r;
  }
};

// Naive attention in double: full softmax per row, and its analytic gradients for L = sum(out * R).
struct Reference {
  Dense out, dq, dk, dv;
  std::vector<double> lse;
};

Reference reference(const AttentionDims& d, const AttentionMask& m, double scale, Dense& q, Dense& k,
                    Dense& v, Dense& dout) {
  Reference r{Dense(d.B, d.Tq, d.H, d.D), Dense(d.B, d.Tq, d.H, d.D), Dense(d.B, d.Tk, d.Hkv, d.D),
              Dense(d.B, d.Tk, d.Hkv, d.D), std::vector<double>(size_t(d.B) * d.H * d.Tq)};
  const int group = d.H / d.Hkv;
  std::vector<double> s(d.Tk), dp(d.Tk);
  for (int b = 0; b < d.B; ++b)
    for (int h = 0; h < d.H; ++h) {
      const int hk = h / group;
      for (int i = 0; i < d.Tq; ++i) {
        double mx = -kInf;
        for (int j = 0; j < d.Tk; ++j) {
          bool visible = m.kind == MaskKind::none || m.k_start + j <= m.q_start + i;
          double dot = 0;
          for (int c = 0; c < d.D; ++c) dot += q.at(b, i, h, c) * k.at(b, j, hk, c);
          s[j] = visible ? scale * dot : -kInf;
          mx = std::max(mx, s[j]);
        }
        double& lse = r.lse[(size_t(b) * d.H + h) * d.Tq + i];
        if (mx == -kInf) {  // sees nothing: out 0, no gradient
          lse = -kInf;
          continue;
        }
        double sum = 0;
        for (int j = 0; j < d.Tk; ++j) sum += std::exp(s[j] - mx);
        lse = mx + std::log(sum);
        for (int j = 0; j < d.Tk; ++j) s[j] = std::exp(s[j] - lse);  // P
        for (int c = 0; c < d.D; ++c) {
          double o = 0;
          for (int j = 0; j < d.Tk; ++j) o += s[j] * v.at(b, j, hk, c);
          r.out.at(b, i, h, c) = o;
        }
        double delta = 0;
        for (int j = 0; j < d.Tk; ++j) {
          dp[j] = 0;
          for (int c = 0; c < d.D; ++c) dp[j] += dout.at(b, i, h, c) * v.at(b, j, hk, c);
          delta += s[j] * dp[j];
        }
        for (int j = 0; j < d.Tk; ++j) {
          double ds = s[j] * (dp[j] - delta);
          for (int c = 0; c < d.D; ++c) {
            r.dv.at(b, j, hk, c) += s[j] * dout.at(b, i, h, c);
            r.dq.at(b, i, h, c) += scale * ds * k.at(b, j, hk, c);
            r.dk.at(b, j, hk, c) += scale * ds * q.at(b, i, h, c);
          }
        }
      }
    }
  return r;
}

Reference reference(Problem& p) {
  Dense q = Dense::of(p.q, p.dims.B, p.dims.Tq), k = Dense::of(p.k, p.dims.B, p.dims.Tk),
        v = Dense::of(p.v, p.dims.B, p.dims.Tk), dout = Dense::of(p.dout, p.dims.B, p.dims.Tq);
  return reference(p.dims, p.mask, p.scale, q, k, v, dout);
}

void expect_near_all(const Strided& got, Dense& want, const Dense* before, int B, int T, double atol,
                     double rtol, const char* what) {
  int bad = 0;
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < got.heads; ++h)
        for (int c = 0; c < got.D; ++c) {
          double g = got.at(b, t, h, c) -
                     (before ? before->x[((size_t(b) * T + t) * got.heads + h) * got.D + c] : 0);
          double w = want.at(b, t, h, c), err = std::abs(g - w);
          worst = std::max(worst, err);
          if (!(err <= atol + rtol * std::abs(w)) && bad++ < 5)
            ADD_FAILURE() << what << " (" << b << "," << t << "," << h << "," << c << "): got " << g
                          << " want " << w;
        }
  EXPECT_EQ(bad, 0) << what << " worst abs error " << worst;
}

// Runs forward and backward and checks everything against the double reference.
void check(Problem& p) {
  const AttentionDims& d = p.dims;
  Dense dq0 = Dense::of(p.dq, d.B, d.Tq), dk0 = Dense::of(p.dk, d.B, d.Tk), dv0 = Dense::of(p.dv, d.B, d.Tk);
  Reference r = reference(p);
  std::vector<size_t> padding;  // NaN everywhere no tensor lives: the kernel must not touch it
  for (size_t i = 0; i < p.storage.size(); ++i)
    if (std::isnan(p.storage[i])) padding.push_back(i);
  forward(p);
  backward(p);
  size_t nans = 0;
  for (float x : p.storage) nans += std::isnan(x);
  EXPECT_EQ(nans, padding.size()) << "a NaN appeared, or padding was written";
  for (size_t i : padding) ASSERT_TRUE(std::isnan(p.storage[i])) << "padding written at " << i;
  expect_near_all(p.out, r.out, nullptr, d.B, d.Tq, 2e-6, 2e-5, "out");
  for (size_t i = 0; i < r.lse.size(); ++i) {
    if (r.lse[i] == -kInf) {
      EXPECT_EQ(p.lse[i], -std::numeric_limits<float>::infinity()) << "lse " << i;
    } else {
      EXPECT_NEAR(p.lse[i], r.lse[i], 1e-5 + 1e-6 * std::abs(r.lse[i])) << "lse " << i;
    }
  }
  expect_near_all(p.dq, r.dq, &dq0, d.B, d.Tq, 2e-5, 1e-4, "dq");
  expect_near_all(p.dk, r.dk, &dk0, d.B, d.Tk, 2e-5, 1e-4, "dk");
  expect_near_all(p.dv, r.dv, &dv0, d.B, d.Tk, 2e-5, 1e-4, "dv");
}

// Sets the backward schedule for one scope (see attention.cpp: fused or split).
struct ScheduleScope {
  explicit ScheduleScope(const char* s) { setenv("ODYSSEY_ATTN_BWD", s, 1); }
  ~ScheduleScope() { unsetenv("ODYSSEY_ATTN_BWD"); }
};

void check_both_schedules(AttentionDims d, AttentionMask m, bool fused_layout = false) {
  for (const char* s : {"fused", "split"}) {
    SCOPED_TRACE(s);
    ScheduleScope scope(s);
    Problem p = make_problem(d, m, fused_layout);
    check(p);
  }
}

TEST(Attention, CausalOddShape) {
  check_both_schedules({3, 37, 37, 5, 5, 24}, {MaskKind::causal, 0, 0});
}

TEST(Attention, CausalSeveralBlocksRagged) {
  check_both_schedules({2, 150, 150, 3, 3, 64}, {MaskKind::causal, 0, 0});
}

TEST(Attention, NoMask) {
  check_both_schedules({2, 37, 53, 3, 3, 24}, {MaskKind::none, 0, 0});
  check_both_schedules({1, 130, 70, 2, 2, 40}, {MaskKind::none, 0, 0});
}

TEST(Attention, HeadSizes) {
  check_both_schedules({2, 19, 19, 3, 3, 1}, {MaskKind::causal, 0, 0});
  check_both_schedules({1, 70, 70, 2, 2, 64}, {MaskKind::causal, 0, 0});
  check_both_schedules({1, 33, 33, 2, 2, 80}, {MaskKind::causal, 0, 0});  // two column chunks (64 + 16)
}

TEST(Attention, GroupedQueryHeads) {
  check_both_schedules({2, 45, 45, 6, 2, 24}, {MaskKind::causal, 0, 0});
  check_both_schedules({1, 90, 90, 6, 3, 16}, {MaskKind::causal, 0, 0});
  check_both_schedules({1, 40, 40, 4, 1, 8}, {MaskKind::none, 0, 0});  // multi-query
}

TEST(Attention, FusedQkvBufferAsGpt2) {
  check_both_schedules({2, 37, 37, 4, 4, 24}, {MaskKind::causal, 0, 0}, true);
  check_both_schedules({1, 100, 100, 2, 2, 64}, {MaskKind::causal, 0, 0}, true);
}

// Ring-attention blocks: queries at global positions 64..95 against 32 keys placed elsewhere.
TEST(Attention, RingBlockFullyVisible) {
  check_both_schedules({2, 32, 32, 3, 3, 24}, {MaskKind::causal, 64, 0});
}

TEST(Attention, RingBlockFullyMasked) {
  const AttentionDims d{2, 32, 32, 3, 3, 24};
  for (const char* s : {"fused", "split"}) {
    ScheduleScope scope(s);
    Problem p = make_problem(d, {MaskKind::causal, 64, 96});
    check(p);  // reference: out 0, lse -inf, no gradient
    for (float l : p.lse) EXPECT_EQ(l, -std::numeric_limits<float>::infinity());
    for (int b = 0; b < d.B; ++b)
      for (int t = 0; t < d.Tq; ++t)
        for (int h = 0; h < d.H; ++h)
          for (int c = 0; c < d.D; ++c) ASSERT_EQ(p.out.at(b, t, h, c), 0.0f);
  }
}

TEST(Attention, RingBlockPartial) {
  check_both_schedules({2, 32, 32, 3, 3, 24}, {MaskKind::causal, 64, 80});  // rows 64..79 see nothing
  check_both_schedules({1, 100, 90, 4, 2, 24}, {MaskKind::causal, 130, 70});
  check_both_schedules({1, 70, 140, 2, 2, 16}, {MaskKind::causal, 0, 10});  // keys past every query
}

TEST(Attention, EmptyKeys) {
  Problem p = make_problem({1, 5, 0, 2, 2, 8}, {MaskKind::none, 0, 0});
  forward(p);
  for (float l : p.lse) EXPECT_EQ(l, -std::numeric_limits<float>::infinity());
  for (int t = 0; t < 5; ++t) EXPECT_EQ(p.out.at(0, t, 1, 7), 0.0f);
}

// The path that runs: the forced one, else the widest this CPU supports (AVX-512 wherever the CPU and
// the OS have it); an unknown path name is an error that names it.
TEST(Attention, RunsTheForcedOrWidestSupportedPath) {
  const std::vector<std::string> paths = attention_isas_supported();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.back(), "portable");
  const char* forced = std::getenv("ODYSSEY_ATTN_ISA");
  const std::string was = forced ? forced : "";
  EXPECT_EQ(attention_isa(), was.empty() ? paths.front() : was);
  unsetenv("ODYSSEY_ATTN_ISA");
  EXPECT_EQ(attention_isa(), paths.front());
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
  if (cpu_info().avx512f) {  // the bf16 dot-product path where the CPU has AVX512_BF16 too
    EXPECT_EQ(attention_isa(), std::string(cpu_info().avx512_bf16 ? "avx512_bf16" : "avx512"));
    EXPECT_NE(std::find(paths.begin(), paths.end(), "avx512"), paths.end());
  }
  if (cpu_info().avx2 && cpu_info().fma) {
    EXPECT_NE(std::find(paths.begin(), paths.end(), "avx2"), paths.end());
  }
#endif
  setenv("ODYSSEY_ATTN_ISA", "avx1024", 1);
  Problem p = make_problem({1, 4, 4, 2, 2, 8}, {MaskKind::none, 0, 0});
  try {
    forward(p);
    ADD_FAILURE() << "ODYSSEY_ATTN_ISA=avx1024 was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ODYSSEY_ATTN_ISA=avx1024"), std::string::npos) << e.what();
  }
  if (was.empty()) {
    unsetenv("ODYSSEY_ATTN_ISA");
  } else {
    setenv("ODYSSEY_ATTN_ISA", was.c_str(), 1);
  }
}

TEST(Attention, RejectsBadHeads) {
  Problem p = make_problem({1, 4, 4, 6, 4, 8}, {MaskKind::none, 0, 0});
  EXPECT_THROW(forward(p), std::runtime_error);
}

// The reference's analytic gradients agree with central differences of its own forward, and the
// fp32 kernel's backward agrees with central differences of the fp32 kernel's forward.
TEST(Attention, FiniteDifferences) {
  const AttentionDims d{1, 7, 9, 2, 1, 3};
  const AttentionMask m{MaskKind::causal, 4, 1};  // rows 0..2 see some keys, row 0 sees only 4
  Problem p = make_problem(d, m);
  Dense q = Dense::of(p.q, 1, d.Tq), k = Dense::of(p.k, 1, d.Tk), v = Dense::of(p.v, 1, d.Tk),
        r = Dense::of(p.dout, 1, d.Tq);
  Reference ref = reference(d, m, p.scale, q, k, v, r);
  auto ref_loss = [&] {
    Reference x = reference(d, m, p.scale, q, k, v, r);
    double l = 0;
    for (size_t i = 0; i < x.out.x.size(); ++i) l += x.out.x[i] * r.x[i];
    return l;
  };
  auto kernel_loss = [&] {
    forward(p);
    double l = 0;
    for (int t = 0; t < d.Tq; ++t)
      for (int h = 0; h < d.H; ++h)
        for (int c = 0; c < d.D; ++c) l += double{p.out.at(0, t, h, c)} * p.dout.at(0, t, h, c);
    return l;
  };
  Dense dq0 = Dense::of(p.dq, 1, d.Tq), dk0 = Dense::of(p.dk, 1, d.Tk), dv0 = Dense::of(p.dv, 1, d.Tk);
  forward(p);
  backward(p);
  struct Input {
    Dense* dense;
    Strided s;
    Dense* ref_grad;
    Strided grad;
    Dense* grad0;
  };
  for (Input in : {Input{&q, p.q, &ref.dq, p.dq, &dq0}, Input{&k, p.k, &ref.dk, p.dk, &dk0},
                   Input{&v, p.v, &ref.dv, p.dv, &dv0}}) {
    for (int t = 0; t < in.dense->T; ++t)
      for (int h = 0; h < in.dense->heads; ++h)
        for (int c = 0; c < d.D; ++c) {
          double& x = in.dense->at(0, t, h, c);
          const double x0 = x, e = 1e-5;
          x = x0 + e;
          double lp = ref_loss();
          x = x0 - e;
          double lm = ref_loss();
          x = x0;
          EXPECT_NEAR((lp - lm) / (2 * e), in.ref_grad->at(0, t, h, c), 1e-7);

          float& xf = in.s.at(0, t, h, c);
          const float xf0 = xf, ef = 1e-2f;
          xf = xf0 + ef;
          double kp = kernel_loss();
          xf = xf0 - ef;
          double km = kernel_loss();
          xf = xf0;
          double got = in.grad.at(0, t, h, c) - in.grad0->at(0, t, h, c);
          EXPECT_NEAR((kp - km) / (2 * double{ef}), got, 1e-4) << t << "," << h << "," << c;
        }
  }
}

// Ring attention: attention over all keys equals the LSE merge of attention over two key halves
// (keys at their global positions), and the backward of each half, given the merged out and lse,
// sums to the full backward.
TEST(Attention, LseMergeOfKeyHalvesEqualsFull) {
  for (AttentionMask m : {AttentionMask{MaskKind::causal, 0, 0}, AttentionMask{MaskKind::causal, 50, 0},
                          AttentionMask{MaskKind::none, 0, 0}}) {
    const AttentionDims d{2, 90, 90, 4, 2, 24};
    const int half = 41;  // ragged split
    const AttentionDims d1{d.B, d.Tq, half, d.H, d.Hkv, d.D}, d2{d.B, d.Tq, d.Tk - half, d.H, d.Hkv, d.D};
    const AttentionMask m1 = m, m2{m.kind, m.q_start, m.k_start + half};
    Problem p = make_problem(d, m);
    auto offset = [](const Strided& s, int t) {
      return HeadsView{s.data + t * s.row_stride, s.batch_stride, s.row_stride};
    };
    auto moffset = [](const Strided& s, int t) {
      return MutHeadsView{s.data + t * s.row_stride, s.batch_stride, s.row_stride};
    };
    const size_t n_out = size_t(d.B) * d.Tq * d.H * d.D;
    std::vector<float> o1(n_out), o2(n_out), l1(p.lse.size()), l2(p.lse.size());
    const int64_t ob = int64_t{d.Tq} * d.H * d.D, orow = int64_t{d.H} * d.D;
    attention_forward({o1.data(), ob, orow}, l1.data(), p.q.view(), offset(p.k, 0), offset(p.v, 0), d1, m1,
                      p.scale);
    attention_forward({o2.data(), ob, orow}, l2.data(), p.q.view(), offset(p.k, half), offset(p.v, half), d2,
                      m2, p.scale);
    forward(p);  // all keys at once
    for (int b = 0; b < d.B; ++b)
      for (int h = 0; h < d.H; ++h)
        for (int t = 0; t < d.Tq; ++t) {
          size_t li = (size_t(b) * d.H + h) * d.Tq + t;
          double a = l1[li], c = l2[li], mx = std::max(a, c);
          double lse = mx == -kInf ? -kInf : mx + std::log(std::exp(a - mx) + std::exp(c - mx));
          if (lse == -kInf) {
            EXPECT_EQ(p.lse[li], -std::numeric_limits<float>::infinity());
          } else {
            EXPECT_NEAR(p.lse[li], lse, 1e-5);
          }
          double w1 = lse == -kInf ? 0 : std::exp(a - lse), w2 = lse == -kInf ? 0 : std::exp(c - lse);
          for (int x = 0; x < d.D; ++x) {
            size_t oi = size_t(b) * ob + size_t(t) * orow + h * d.D + x;
            EXPECT_NEAR(p.out.at(b, t, h, x), w1 * o1[oi] + w2 * o2[oi], 1e-5);
          }
        }

    // Backward by halves, each with the final out and lse, against one backward over all keys.
    Dense dq0 = Dense::of(p.dq, d.B, d.Tq), dk0 = Dense::of(p.dk, d.B, d.Tk),
          dv0 = Dense::of(p.dv, d.B, d.Tk);
    attention_backward(p.dq.mut(), moffset(p.dk, 0), moffset(p.dv, 0), p.dout.view(), p.out.view(),
                       p.lse.data(), p.q.view(), offset(p.k, 0), offset(p.v, 0), d1, m1, p.scale);
    attention_backward(p.dq.mut(), moffset(p.dk, half), moffset(p.dv, half), p.dout.view(), p.out.view(),
                       p.lse.data(), p.q.view(), offset(p.k, half), offset(p.v, half), d2, m2, p.scale);
    Reference r = reference(p);
    expect_near_all(p.dq, r.dq, &dq0, d.B, d.Tq, 2e-5, 1e-4, "dq by halves");
    expect_near_all(p.dk, r.dk, &dk0, d.B, d.Tk, 2e-5, 1e-4, "dk by halves");
    expect_near_all(p.dv, r.dv, &dv0, d.B, d.Tk, 2e-5, 1e-4, "dv by halves");
  }
}

// Same bits whatever the schedule and the thread count: nothing depends on who ran which task.
TEST(Attention, DeterministicAcrossSchedulesAndThreads) {
  const AttentionDims d{2, 200, 200, 4, 2, 40};
  const AttentionMask m{MaskKind::causal, 0, 0};
  std::vector<std::vector<float>> results;
  const int threads = omp_get_max_threads();
  for (const char* s : {"fused", "split"})
    for (int nt : {1, 2, 3}) {
      ScheduleScope scope(s);
      omp_set_num_threads(nt);
      Problem p = make_problem(d, m);
      forward(p);
      backward(p);
      p.storage.insert(p.storage.end(), p.lse.begin(), p.lse.end());
      results.push_back(std::move(p.storage));
    }
  omp_set_num_threads(threads);
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(results[i].size(), results[0].size());
    // memcmp, not ==: the NaN padding must match too (it must be untouched).
    EXPECT_EQ(std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(float)), 0) << i;
  }
}

// The kernel's scratch is the calling thread's workspace, kept between calls (attention_workspace.h).
// A call must not read what the previous call left there: after a larger call on NaN inputs has
// filled the workspace (packed inputs and every thread's tiles, both schedules) with NaN, a call gives
// the same bits as on a freshly released, zeroed workspace.
TEST(Attention, WorkspaceLeftoversDoNotChangeResults) {
  const AttentionDims small{2, 77, 77, 6, 3, 40}, large{2, 300, 300, 8, 8, 64};
  const AttentionMask causal{MaskKind::causal, 0, 0}, none{MaskKind::none, 0, 0};
  for (const char* s : {"fused", "split"}) {
    SCOPED_TRACE(s);
    ScheduleScope scope(s);
    auto run_small = [&](const AttentionMask& m) {
      Problem p = make_problem(small, m);
      forward(p);
      backward(p);
      p.storage.insert(p.storage.end(), p.lse.begin(), p.lse.end());
      return p.storage;
    };
    for (const AttentionMask& m : {causal, none}) {
      attention_workspace_release();
      ASSERT_EQ(attention_workspace_bytes(), 0u);
      const std::vector<float> fresh = run_small(m);
      EXPECT_GT(attention_workspace_bytes(), 0u);  // kept for the next call

      for (const char* poison_schedule : {"fused", "split"}) {
        ScheduleScope poison_scope(poison_schedule);
        Problem poison = make_problem(large, none);
        std::fill(poison.storage.begin(), poison.storage.end(), std::nanf(""));
        forward(poison);
        backward(poison);
      }
      const std::vector<float> reused = run_small(m);
      ASSERT_EQ(reused.size(), fresh.size());
      EXPECT_EQ(std::memcmp(reused.data(), fresh.data(), fresh.size() * sizeof(float)), 0);
    }
  }
}

// The fast kernel against the reference kernel on the same inputs (and both against the double
// reference, through check()): out, lse, dq, dk, dv within the double-reference tolerances.
void check_against_reference_kernel(AttentionDims d, AttentionMask m) {
  SCOPED_TRACE(testing::Message() << "B=" << d.B << " Tq=" << d.Tq << " Tk=" << d.Tk << " H=" << d.H
                                  << " Hkv=" << d.Hkv << " D=" << d.D
                                  << " causal=" << (m.kind == MaskKind::causal) << " q_start=" << m.q_start
                                  << " k_start=" << m.k_start);
  Problem fast = make_problem(d, m), ref = make_problem(d, m);  // same seed: same inputs
  Dense dq0 = Dense::of(ref.dq, d.B, d.Tq), dk0 = Dense::of(ref.dk, d.B, d.Tk),
        dv0 = Dense::of(ref.dv, d.B, d.Tk);
  check(fast);
  attention_reference_forward(ref.out.mut(), ref.lse.data(), ref.q.view(), ref.k.view(), ref.v.view(), d, m,
                              ref.scale);
  attention_reference_backward(ref.dq.mut(), ref.dk.mut(), ref.dv.mut(), ref.dout.view(), ref.out.view(),
                               ref.lse.data(), ref.q.view(), ref.k.view(), ref.v.view(), d, m, ref.scale);
  Dense out = Dense::of(ref.out, d.B, d.Tq), dq = Dense::of(ref.dq, d.B, d.Tq),
        dk = Dense::of(ref.dk, d.B, d.Tk), dv = Dense::of(ref.dv, d.B, d.Tk);
  for (Dense* g : {&dq, &dk, &dv}) {  // the reference kernel's gradient, without the starting values
    const Dense& g0 = g == &dq ? dq0 : g == &dk ? dk0 : dv0;
    for (size_t i = 0; i < g->x.size(); ++i) g->x[i] -= g0.x[i];
  }
  expect_near_all(fast.out, out, nullptr, d.B, d.Tq, 2e-6, 2e-5, "out vs reference kernel");
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      EXPECT_EQ(fast.lse[i], ref.lse[i]) << "lse " << i;
    } else {
      EXPECT_NEAR(fast.lse[i], ref.lse[i], 1e-5 + 1e-6 * std::abs(ref.lse[i])) << "lse " << i;
    }
  }
  expect_near_all(fast.dq, dq, &dq0, d.B, d.Tq, 2e-5, 1e-4, "dq vs reference kernel");
  expect_near_all(fast.dk, dk, &dk0, d.B, d.Tk, 2e-5, 1e-4, "dk vs reference kernel");
  expect_near_all(fast.dv, dv, &dv0, d.B, d.Tk, 2e-5, 1e-4, "dv vs reference kernel");
}

TEST(Attention, MatchesReferenceKernelOnOddShapes) {
  for (int D : {24, 64, 128})
    for (const char* s : {"fused", "split"}) {
      SCOPED_TRACE(s);
      ScheduleScope scope(s);
      const AttentionMask causal{MaskKind::causal, 0, 0}, none{MaskKind::none, 0, 0};
      check_against_reference_kernel({2, 37, 37, 5, 5, D}, causal);
      check_against_reference_kernel({2, 37, 37, 5, 5, D}, none);
      check_against_reference_kernel({1, 37, 37, 5, 1, D}, causal);  // multi-query
      check_against_reference_kernel({1, 37, 37, 6, 3, D}, causal);  // grouped query heads
      check_against_reference_kernel({1, 37, 37, 6, 2, D}, none);
      // Ring steps: queries after every key, queries straddling the keys, and (zigzag) keys after
      // some queries.
      check_against_reference_kernel({1, 37, 29, 5, 5, D}, {MaskKind::causal, 37, 0});
      check_against_reference_kernel({1, 37, 29, 5, 5, D}, {MaskKind::causal, 20, 10});
      check_against_reference_kernel({1, 37, 53, 5, 5, D}, {MaskKind::causal, 0, 30});
    }
}

// Chunked attention: each query chunk [t0, t1) against the key prefix [0, t1) (long-context-memory.md
// §4.1) gives bitwise the out, lse and dq of the whole-sequence call; dk, dv summed over the chunks
// equal the whole call's up to rounding (their query blocks are summed in another order).
TEST(Attention, QueryChunksAgainstKeyPrefixGiveTheSameBits) {
  for (int D : {24, 64, 128}) {
    SCOPED_TRACE(D);
    const int B = 2, T = 157, H = 4, Hkv = 2;
    const AttentionDims d{B, T, T, H, Hkv, D};
    Problem whole = make_problem(d, {MaskKind::causal, 0, 0}),
            chunked = make_problem(d, {MaskKind::causal, 0, 0});
    Dense dk0 = Dense::of(chunked.dk, B, T), dv0 = Dense::of(chunked.dv, B, T);
    forward(whole);
    backward(whole);
    for (int t0 : {0, 50, 101}) {  // chunks of 50, 51 and 56 queries, at no tile boundary
      const int t1 = t0 == 101 ? T : t0 + (t0 == 0 ? 50 : 51), tc = t1 - t0;
      const AttentionDims dc{B, tc, t1, H, Hkv, D};
      const AttentionMask mc{MaskKind::causal, t0, 0};
      auto rows = [t0](const Strided& s) {
        return HeadsView{s.data + t0 * s.row_stride, s.batch_stride, s.row_stride};
      };
      auto mrows = [t0](const Strided& s) {
        return MutHeadsView{s.data + t0 * s.row_stride, s.batch_stride, s.row_stride};
      };
      std::vector<float> lse(size_t(B) * H * tc);
      attention_forward(mrows(chunked.out), lse.data(), rows(chunked.q), chunked.k.view(), chunked.v.view(),
                        dc, mc, chunked.scale);
      for (int bh = 0; bh < B * H; ++bh)
        for (int t = 0; t < tc; ++t) {
          ASSERT_EQ(
              std::memcmp(&lse[size_t(bh) * tc + t], &whole.lse[size_t(bh) * T + t0 + t], sizeof(float)), 0)
              << "lse " << bh << "," << t0 + t;
          chunked.lse[size_t(bh) * T + t0 + t] = lse[size_t(bh) * tc + t];
        }
      attention_backward(mrows(chunked.dq), chunked.dk.mut(), chunked.dv.mut(), rows(chunked.dout),
                         rows(chunked.out), lse.data(), rows(chunked.q), chunked.k.view(), chunked.v.view(),
                         dc, mc, chunked.scale);
    }
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h)
          for (int c = 0; c < D; ++c) {
            ASSERT_EQ(std::memcmp(&chunked.out.at(b, t, h, c), &whole.out.at(b, t, h, c), sizeof(float)), 0)
                << "out " << b << "," << t << "," << h << "," << c;
            ASSERT_EQ(std::memcmp(&chunked.dq.at(b, t, h, c), &whole.dq.at(b, t, h, c), sizeof(float)), 0)
                << "dq " << b << "," << t << "," << h << "," << c;
          }
    Dense dk = Dense::of(whole.dk, B, T), dv = Dense::of(whole.dv, B, T);
    for (size_t i = 0; i < dk.x.size(); ++i) {
      dk.x[i] -= dk0.x[i];
      dv.x[i] -= dv0.x[i];
    }
    expect_near_all(chunked.dk, dk, &dk0, B, T, 2e-5, 1e-4, "dk by query chunks");
    expect_near_all(chunked.dv, dv, &dv0, B, T, 2e-5, 1e-4, "dv by query chunks");
  }
}

}  // namespace
}  // namespace odyssey
