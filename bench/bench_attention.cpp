// Attention forward and backward time for GPT-2 shapes (B=1, H=12, D=64, causal), both backward
// schedules, and oneDNN gemm on the kernel's 64x64x64 tiles for comparison with the micro-kernels.
// Prints one JSON object.
//
// FLOP convention (flash-attention's): forward = 4 Tq Tk D per (b, h) (Q K^T and P V), halved when
// causal with Tq = Tk; backward = 2.5x forward (recomputed Q K^T, dV, dP, dQ, dK). Extra work a
// schedule does (the split schedule's second Q K^T and dO V^T) is not counted.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "odyssey/core/timer.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/gemm.h"

using namespace odyssey;

namespace {

double cpu_ms() {  // CPU time of the whole process (all threads)
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// Median wall and CPU time in ms of fn over enough repetitions to take ~min_seconds (at least 3).
// CPU time (summed over threads) gives per-core throughput that holds up when other processes share
// the cores; wall time is what a training step sees.
struct Times {
  double wall_ms, cpu_ms;
};
template <typename F>
Times median_ms(F&& fn, double min_seconds = 1.0) {
  fn();  // warm up: page faults, oneDNN primitive creation
  std::vector<double> wall, cpu;
  Timer total;
  while (wall.size() < 3 || (total.seconds() < min_seconds && wall.size() < 200)) {
    Timer t;
    double c0 = cpu_ms();
    fn();
    cpu.push_back(cpu_ms() - c0);
    wall.push_back(t.ms());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

std::string bench_shape(int T, bool causal) {
  const int B = 1, H = 12, D = 64, C = H * D;
  const AttentionDims dims{B, T, T, H, H, D};
  const AttentionMask mask{causal ? MaskKind::causal : MaskKind::none, 0, 0};
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

  const double fwd_flops = 4.0 * B * H * double(T) * T * D * (causal ? 0.5 : 1.0),
               bwd_flops = 2.5 * fwd_flops;
  // "gflops": wall clock, all threads; "gflops_per_core": per second of CPU time.
  auto entry = [](const char* name, double flops, Times t) {
    return fmt::format(R"("{}_ms": {:.3f}, "{}_gflops": {:.1f}, "{}_gflops_per_core": {:.1f})", name,
                       t.wall_ms, name, flops / t.wall_ms / 1e6, name, flops / t.cpu_ms / 1e6);
  };
  std::string json = entry("forward", fwd_flops,
                           median_ms([&] { attention_forward(o, lse.data(), q, k, v, dims, mask, scale); }));
  for (const char* schedule : {"fused", "split"}) {
    setenv("ODYSSEY_ATTN_BWD", schedule, 1);
    Times t =
        median_ms([&] { attention_backward(dq, dk, dv, g, oc, lse.data(), q, k, v, dims, mask, scale); });
    json +=
        ", " + entry(schedule == std::string("fused") ? "backward_fused" : "backward_split", bwd_flops, t);
  }
  unsetenv("ODYSSEY_ATTN_BWD");
  return fmt::format(R"({{"B": {}, "T": {}, "H": {}, "D": {}, "causal": {}, {}}})", B, T, H, D, causal, json);
}

// oneDNN gemm on the tile products the kernel does (S = Q K^T, O += P V, 64x64x64), called from every
// thread at once as it would be inside the kernel's parallel region.
std::string bench_tile_gemm() {
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
  return fmt::format(
      R"({{"tile": [{}, {}, {}], "threads": {}, "gflops": {:.1f}, "gflops_per_core": {:.1f}}})", n, n, n,
      threads, flops / t.wall_ms / 1e6, flops / t.cpu_ms / 1e6);
}

}  // namespace

int main() {
  std::string shapes;
  for (int T : {1024, 4096}) shapes += (shapes.empty() ? "" : ",\n    ") + bench_shape(T, true);
  fmt::print(
      "{{\n  \"threads\": {},\n  \"flop_convention\": \"forward 4*T*T*D per head (half if causal), "
      "backward 2.5x forward\",\n  \"attention\": [\n    {}\n  ],\n  \"block_gemm_onednn\": {}\n}}\n",
      omp_get_max_threads(), shapes, bench_tile_gemm());
}
