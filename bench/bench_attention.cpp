// Attention forward and backward speed next to the fp32 GEMM rate measured in the same run, so the
// ratio holds up on a shared machine. Causal, B = 1, C = H * D = 768 (GPT-2's width), fused qkv
// buffer as the model passes it. Prints one JSON object with the host record (CPU, ISA).
//
//   bench_attention [--T 1024,4096,16384] [--D 64,128] [--reference] [--schedules] [--bf16]
//
// --reference also times the reference kernel (attention_reference.h); --schedules times both
// backward schedules (fused, split) instead of the one the kernel chooses; --bf16 also times the kernel
// under the bf16 policy (attention_forward_bf16 with a bf16 out, attention_backward_bf16 into fp32
// gradients) on the same values rounded to bf16, entries "bf16_forward", "bf16_backward", each timed
// alternately with its fp32 pass (one fp32 call, one bf16 call, ...: a change of load weighs on both),
// and their speed against fp32 ("bf16_vs_fp32_<pass>": fp32 ms / bf16 ms; "..._per_core": the same from
// CPU time; "<prefix>forward_backward": tokens/s of a forward plus a backward). Every entry has
// "tokens_per_s" (B T per second of wall time). The JSON names the attention path ("attention_isa"),
// whether the bf16 entries ran on bf16 dot products or on fp32 tiles (bf16 storage, fp32 compute), and
// the load average before and after the run (a shared machine's timings are noise: compare ratios).
//
// FLOP convention (flash-attention's): forward = 4 Tq Tk D per (b, h) (Q K^T and P V), halved when
// causal with Tq = Tk; backward = 2.5x forward (recomputed Q K^T, dV, dP, dQ, dK). Extra work a
// schedule does (the split schedule's second Q K^T and dO V^T) is not counted.
// GEMM rates: oneDNN (kernels/gemm.h) on 1024^3 with all threads, and on 64^3 tiles called from every
// thread at once, as a tile product inside a parallel region would be.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "odyssey/core/bf16.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/attention_reference.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/train/host_info.h"

using namespace odyssey;
using nlohmann::json;

namespace {

double cpu_ms() {  // CPU time of the whole process (all threads)
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// Median wall and CPU time in ms of fn over enough repetitions to take ~min_seconds (at least 3).
// CPU time (summed over threads) gives per-core throughput that holds up when other processes share
// the cores; wall time is what a training step sees. The first call is a warm-up and never timed (page
// faults, oneDNN primitives, the workspace's growth); when it took longer than min_seconds one more
// call is timed (16K tokens: seconds each).
struct Times {
  double wall_ms, cpu_ms;
  int runs;
};
Times median_of(std::vector<double> wall, std::vector<double> cpu) {
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2], static_cast<int>(wall.size())};
}
template <typename F>
Times median_ms(F&& fn, double min_seconds = 1.0) {
  std::vector<double> wall, cpu;
  Timer warm_up;
  fn();
  const bool long_call = warm_up.seconds() > min_seconds;
  Timer total;
  while (wall.empty() ||
         (!long_call && (wall.size() < 3 || (total.seconds() < min_seconds && wall.size() < 200)))) {
    Timer t;
    double c0 = cpu_ms();
    fn();
    cpu.push_back(cpu_ms() - c0);
    wall.push_back(t.ms());
  }
  return median_of(wall, cpu);
}

// median_ms of fa and of fb, their calls alternating (a, b, a, b, ...) for ~2 min_seconds.
template <typename FA, typename FB>
std::pair<Times, Times> alternating_median_ms(FA&& fa, FB&& fb, double min_seconds = 1.0) {
  std::vector<double> wall[2], cpu[2];
  Timer warm_up;
  fa();
  fb();
  const bool long_call = warm_up.seconds() > 2 * min_seconds;
  Timer total;
  auto time = [&](int i, auto& fn) {
    Timer t;
    double c0 = cpu_ms();
    fn();
    cpu[i].push_back(cpu_ms() - c0);
    wall[i].push_back(t.ms());
  };
  while (wall[0].empty() || (!long_call && (wall[0].size() < 3 ||
                                            (total.seconds() < 2 * min_seconds && wall[0].size() < 200)))) {
    time(0, fa);
    time(1, fb);
  }
  return {median_of(wall[0], cpu[0]), median_of(wall[1], cpu[1])};
}

double load_average() {  // the 1-minute load average (-1 where the system does not say)
  double load[1];
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

double round1(double x) {
  return std::round(x * 10.0) / 10.0;
}
double round3(double x) {
  return std::round(x * 1000.0) / 1000.0;
}

struct GemmRate {
  double gflops, gflops_per_core;
};

// "gflops": wall clock, all threads; "gflops_per_core": per second of CPU time.
json entry(double flops, Times t) {
  return {{"ms", round3(t.wall_ms)},
          {"runs", t.runs},
          {"gflops", round1(flops / t.wall_ms / 1e6)},
          {"gflops_per_core", round1(flops / t.cpu_ms / 1e6)}};
}

// Adds "of_gemm" (and "of_gemm_per_core") to every timing entry of a shape: its rate as a fraction of
// the same-run oneDNN 1024^3 rate.
void add_gemm_ratios(json& shape, const GemmRate& gemm_rate) {
  for (auto& [key, value] : shape.items())
    if (value.is_object() && value.contains("gflops")) {
      value["of_gemm"] = round3(value["gflops"].get<double>() / gemm_rate.gflops);
      value["of_gemm_per_core"] = round3(value["gflops_per_core"].get<double>() / gemm_rate.gflops_per_core);
    }
}

struct Options {
  std::vector<int> T{1024, 4096, 16384};
  std::vector<int> D{64, 128};
  bool reference = false, schedules = false, bf16 = false;
};

using ForwardFn = void (*)(MutHeadsView, float*, HeadsView, HeadsView, HeadsView, AttentionDims,
                           AttentionMask, float);
using BackwardFn = void (*)(MutHeadsView, MutHeadsView, MutHeadsView, HeadsView, HeadsView, const float*,
                            HeadsView, HeadsView, HeadsView, AttentionDims, AttentionMask, float);

json bench_shape(int T, int D, const Options& opt) {
  const int B = 1, C = 768, H = C / D;
  const AttentionDims dims{B, T, T, H, H, D};
  const AttentionMask mask{MaskKind::causal, 0, 0};
  const float scale = 1.0f / std::sqrt(float(D));
  // GPT-2's fused qkv buffer [B, T, 3C]; out, dout [B, T, C].
  std::vector<float> qkv(size_t(B) * T * 3 * C), dqkv(qkv.size()), out(size_t(B) * T * C), dout(out.size()),
      lse(size_t(B) * H * T);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  const int64_t bs = int64_t{T} * 3 * C, rs = 3 * C;
  HeadsView q{qkv.data(), bs, rs}, k{qkv.data() + C, bs, rs}, v{qkv.data() + 2 * C, bs, rs};
  MutHeadsView dq{dqkv.data(), bs, rs}, dk{dqkv.data() + C, bs, rs}, dv{dqkv.data() + 2 * C, bs, rs};
  MutHeadsView o{out.data(), int64_t{T} * C, C};
  HeadsView oc{out.data(), int64_t{T} * C, C}, g{dout.data(), int64_t{T} * C, C};

  const double fwd_flops = 4.0 * B * H * double(T) * T * D * 0.5, bwd_flops = 2.5 * fwd_flops;
  json shape = {{"B", B}, {"T", T}, {"H", H}, {"D", D}, {"causal", true}};
  auto run = [&](const char* prefix, ForwardFn fwd, BackwardFn bwd) {
    shape[std::string(prefix) + "forward"] =
        entry(fwd_flops, median_ms([&] { fwd(o, lse.data(), q, k, v, dims, mask, scale); }));
    auto backward = [&] { bwd(dq, dk, dv, g, oc, lse.data(), q, k, v, dims, mask, scale); };
    if (!opt.schedules) {
      shape[std::string(prefix) + "backward"] = entry(bwd_flops, median_ms(backward));
      return;
    }
    for (const char* schedule : {"fused", "split"}) {
      setenv("ODYSSEY_ATTN_BWD", schedule, 1);
      shape[std::string(prefix) + "backward_" + schedule] = entry(bwd_flops, median_ms(backward));
    }
    unsetenv("ODYSSEY_ATTN_BWD");
  };
  // --bf16: every pass reads bf16 values (the fp32 one their fp32 copies), as the policy's would.
  if (opt.bf16)
    for (std::vector<float>* x : {&qkv, &dout})
      for (float& e : *x) e = round_to_bf16(e);
  if (!opt.bf16) run("", attention_forward, attention_backward);
  if (opt.reference) run("reference_", attention_reference_forward, attention_reference_backward);
  if (opt.bf16) {
    std::vector<bf16> qkv_b(qkv.size()), dout_b(dout.size()), out_b(out.size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv_b[i] = to_bf16(qkv[i]);
    for (size_t i = 0; i < dout.size(); ++i) dout_b[i] = to_bf16(dout[i]);
    Bf16HeadsView qb{qkv_b.data(), bs, rs}, kb{qkv_b.data() + C, bs, rs}, vb{qkv_b.data() + 2 * C, bs, rs};
    MutBf16HeadsView ob{out_b.data(), int64_t{T} * C, C};
    Bf16HeadsView obc{out_b.data(), int64_t{T} * C, C}, gb{dout_b.data(), int64_t{T} * C, C};
    // fp32 and bf16 alternately (the fp32 pass on the same rounded values); the backward's lse is each
    // policy's own, from the forward timed just before.
    std::vector<float> lse_b(lse.size());
    const auto [fwd32, fwd16] = alternating_median_ms(
        [&] { attention_forward(o, lse.data(), q, k, v, dims, mask, scale); },
        [&] { attention_forward_bf16(ob, lse_b.data(), qb, kb, vb, dims, mask, scale); });
    const auto [bwd32, bwd16] = alternating_median_ms(
        [&] { attention_backward(dq, dk, dv, g, oc, lse.data(), q, k, v, dims, mask, scale); },
        [&] { attention_backward_bf16(dq, dk, dv, gb, obc, lse_b.data(), qb, kb, vb, dims, mask, scale); });
    shape["forward"] = entry(fwd_flops, fwd32);
    shape["bf16_forward"] = entry(fwd_flops, fwd16);
    shape["backward"] = entry(bwd_flops, bwd32);
    shape["bf16_backward"] = entry(bwd_flops, bwd16);
    for (const char* prefix : {"", "bf16_"}) {
      const double ms = shape[std::string(prefix) + "forward"]["ms"].get<double>() +
                        shape[std::string(prefix) + "backward"]["ms"].get<double>();
      shape[std::string(prefix) + "forward_backward"] = {{"ms", round3(ms)}};
    }
    // Wall-time and per-core (CPU-time) ratios: on a shared machine the second holds up better.
    for (const char* pass : {"forward", "backward"}) {
      const json &fp32 = shape[pass], &b16 = shape[std::string("bf16_") + pass];
      shape[std::string("bf16_vs_fp32_") + pass] = round3(fp32["ms"].get<double>() / b16["ms"].get<double>());
      shape[std::string("bf16_vs_fp32_") + pass + "_per_core"] =
          round3(b16["gflops_per_core"].get<double>() / fp32["gflops_per_core"].get<double>());
    }
    shape["bf16_vs_fp32_forward_backward"] = round3(shape["forward_backward"]["ms"].get<double>() /
                                                    shape["bf16_forward_backward"]["ms"].get<double>());
  }
  for (auto& [key, value] : shape.items())
    if (value.is_object() && value.contains("ms"))
      value["tokens_per_s"] = round1(B * T / value["ms"].get<double>() * 1e3);
  return shape;
}

GemmRate bench_gemm_1024() {
  const int n = 1024;
  std::vector<float> a(size_t(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  Times t = median_ms([&] { gemm(c.data(), a.data(), b.data(), nullptr, n, n, n, false, false, false); });
  const double flops = 2.0 * n * n * n;
  return {flops / t.wall_ms / 1e6, flops / t.cpu_ms / 1e6};
}

// oneDNN gemm on 64^3 tile products (S = Q K^T, O += P V), called from every thread at once.
GemmRate bench_tile_gemm() {
  const int n = 64, reps = 2000;
  const int threads = omp_get_max_threads();
  std::vector<std::vector<float>> bufs(threads, std::vector<float>(4 * n * n, 0.5f));
  Times t = median_ms(
      [&] {
#pragma omp parallel
        {
          float* a = bufs[omp_get_thread_num()].data();
          for (int r = 0; r < reps; ++r) {
            gemm(a + 2 * n * n, a, a + n * n, nullptr, n, n, n, false, true, false);              // S = Q K^T
            gemm(a + 3 * n * n, a + 2 * n * n, a + n * n, nullptr, n, n, n, false, false, true);  // O += P V
          }
        }
      },
      0.5);
  const double flops = 2.0 * 2.0 * n * n * n * reps * threads;
  return {flops / t.wall_ms / 1e6, flops / t.cpu_ms / 1e6};
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--T" && i + 1 < argc) {
      opt.T = parse_list(argv[++i]);
    } else if (a == "--D" && i + 1 < argc) {
      opt.D = parse_list(argv[++i]);
    } else if (a == "--reference") {
      opt.reference = true;
    } else if (a == "--schedules") {
      opt.schedules = true;
    } else if (a == "--bf16") {
      opt.bf16 = true;
    } else {
      fmt::print(
          stderr,
          "usage: bench_attention [--T 1024,4096] [--D 64,128] [--reference] [--schedules] [--bf16]\n");
      return 2;
    }
  }
  const int threads = omp_get_max_threads();
  const double load_before = load_average();
  // The GEMM rates are measured before and after the attention shapes and averaged, so a change in
  // the machine's load during the run weighs on both sides of the ratio.
  GemmRate before = bench_gemm_1024();
  json shapes = json::array();
  for (int T : opt.T)
    for (int D : opt.D) {
      shapes.push_back(bench_shape(T, D, opt));
      fmt::print(stderr, "bench_attention: T={} D={} done\n", T, D);
    }
  GemmRate after = bench_gemm_1024(), tile = bench_tile_gemm();
  const GemmRate mean{(before.gflops + after.gflops) / 2,
                      (before.gflops_per_core + after.gflops_per_core) / 2};
  for (json& shape : shapes) add_gemm_ratios(shape, mean);
  json result = {{"host", host_json(threads)},
                 {"flop_convention", "forward 4*T*T*D per head, halved when causal; backward 2.5x forward"},
                 {"gemm_onednn_1024",
                  {{"gflops", round1(mean.gflops)},
                   {"gflops_per_core", round1(mean.gflops_per_core)},
                   {"gflops_before", round1(before.gflops)},
                   {"gflops_after", round1(after.gflops)}}},
                 {"gemm_onednn_tile_64",
                  {{"gflops", round1(tile.gflops)}, {"gflops_per_core", round1(tile.gflops_per_core)}}},
                 {"attention_isa", attention_isa()},
                 {"avx512_bf16", cpu_info().avx512_bf16},
                 {"attention_bf16_products", std::string(attention_isa()) == "avx512_bf16"
                                                 ? "bf16 dot products (VDPBF16PS), fp32 accumulation"
                                                 : "fp32 tiles (bf16 storage, fp32 compute)"},
                 {"load_average", {{"before", round1(load_before)}, {"after", round1(load_average())}}},
                 {"attention", shapes}};
  fmt::print("{}\n", result.dump(2));
}
