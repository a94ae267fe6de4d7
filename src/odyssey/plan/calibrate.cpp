#include "odyssey/plan/calibrate.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>
#include <thread>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/core/host_memory.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/optim/adamw.h"

namespace odyssey {

namespace {

// Median seconds of one call over `reps` samples after one warm-up. Each sample repeats the call until it
// spans at least 20 ms, several scheduler time slices: on a shared host a rank sustains its share of the
// cores over many slices, and a call shorter than one slice (a small GEMM) measured alone runs at the
// idle core's rate (calibrations at load average 8-20 measured small GEMMs 5x faster than large ones).
// world: the ranks that call f together (a collective), which must agree on the calls per sample.
template <typename F>
double median_seconds(int reps, F&& f, Communicator* world = nullptr) {
  constexpr double kWindow = 0.02;
  Timer first;
  f();
  int32_t calls = std::clamp(int32_t(std::ceil(kWindow / std::max(first.seconds(), 1e-7))), 1, 100000);
  if (world) {
    std::vector<int32_t> all(static_cast<size_t>(world->size()));
    world->all_gather(&calls, all.data(), 1, DType::i32);
    calls = *std::max_element(all.begin(), all.end());
  }
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Timer timer;
    for (int c = 0; c < calls; ++c) f();
    t.push_back(timer.seconds() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

GemmRate measure_gemm(int64_t m, int64_t n, int64_t k) {
  FloatBuffer a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
  for (size_t i = 0; i < a.size(); ++i) a.data()[i] = float(i % 7) * 0.01f;
  for (size_t i = 0; i < b.size(); ++i) b.data()[i] = float(i % 5) * 0.01f;
  const double flop = 2.0 * double(m) * double(n) * double(k);
  const int reps = 5;
  const double s = median_seconds(reps, [&] {
    gemm(c.data(), a.data(), b.data(), nullptr, int(m), int(n), int(k), false, false, false);
  });
  return GemmRate{m, n, k, "fp32", flop / s};
}

}  // namespace

Cluster calibrate_host(const RunConfig& config, Communicator& world, int ranks_per_node) {
  Cluster c;
  const int cores = int(std::thread::hardware_concurrency());
  c.name = "local";
  c.nodes = 1;
  c.devices_per_node = ranks_per_node > 0 ? ranks_per_node : world.size();
  c.device_kind = "cpu";
  c.cores_per_node = cores;
  // A CPU "device" is one rank: its share of what the host has available now.
  c.memory_gib =
      std::max(1e-3, double(available_memory_bytes()) / double(uint64_t(1) << 30) / c.devices_per_node);
  c.memory_reserve = 0.1;
  const bool root = world.rank() == 0;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  const std::string stamp = fmt::format("measured {} on {} ({} cores, oneDNN {}, attention {})", date,
                                        cpu_info().model, cores, onednn_isa(), attention_isa());
  world.barrier();
  if (root) {
    // Kernels on one core (a rank's share is cores / ranks, time_model.cpp).
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const ModelConfig& m = config.model;
    const int64_t C = m.d_model, H = m.n_head, Hkv = m.kv_heads(), D = m.head_dim(), F = m.ffn_dim();
    const int64_t base = int64_t(config.train.micro_batch) * config.seq_len() /
                         (config.parallel.sp_ulysses * config.parallel.sp_ring);
    std::set<int64_t> tokens;
    for (int64_t f : {1, 2, 4, 8, 16}) {
      tokens.insert(std::max<int64_t>(16, base * f / 4));
    }
    for (int64_t N : tokens)
      for (auto [n, k] :
           {std::pair{(H + 2 * Hkv) * D, C}, {C, H * D}, {F, C}, {C, F}, {int64_t(m.vocab_size), C}})
        c.gemm.push_back(measure_gemm(N, n, k));
    // A grid around them, for the shapes of other models and layouts (interpolated in log space).
    for (int64_t N : {64, 256, 1024, 4096})
      for (int64_t n : {128, 512, 2048})
        for (int64_t k : {128, 512, 2048}) c.gemm.push_back(measure_gemm(N, n, k));
    // Attention: causal forward + backward on one row of the model's heads, FLOPs 2 T^2 H D x (1 + 2.5).
    {
      const int T = int(std::min<int64_t>(std::max<int64_t>(base, 128), 2048));
      const int64_t row = int64_t(T) * H * D;
      const size_t n = static_cast<size_t>(row), nl = static_cast<size_t>(T * H);
      FloatBuffer q(n), k(n), v(n), o(n), dq(n), dk(n), dv(n), lse(nl);
      for (size_t i = 0; i < q.size(); ++i) q.data()[i] = k.data()[i] = v.data()[i] = float(i % 11) * 0.01f;
      const AttentionDims dims{1, T, T, int(H), int(H), int(D)};
      const HeadsView qv{q.data(), row, H * D}, kv{k.data(), row, H * D}, vv{v.data(), row, H * D};
      const float scale = 1.0f / std::sqrt(float(D));
      const double s = median_seconds(3, [&] {
        attention_forward({o.data(), row, H * D}, lse.data(), qv, kv, vv, dims, {}, scale);
        attention_backward({dq.data(), row, H * D}, {dk.data(), row, H * D}, {dv.data(), row, H * D},
                           {o.data(), row, H * D}, {o.data(), row, H * D}, lse.data(), qv, kv, vv, dims, {},
                           scale);
      });
      c.kernels["attention_flops"] = 2.0 * T * double(T) * H * D * 3.5 / s;
    }
    // AdamW seconds per parameter on one core.
    {
      const size_t n = size_t(1) << 22;
      FloatBuffer p(n), g(n), mm(n), vv(n);
      const double s = median_seconds(5, [&] {
        adamw_update(p.data(), g.data(), mm.data(), vv.data(), n, AdamWConfig{}, 1e-4f, 1, 1.0f, true);
      });
      c.kernels["adamw_per_param"] = s / double(n);
    }
    // Memory bandwidth of the memory-bound kernels, all cores: a LayerNorm forward reads and writes N x C.
    omp_set_num_threads(cores);
    {
      const int N = 8192, W = int(std::max<int64_t>(C, 256));
      const size_t nw = static_cast<size_t>(N) * W;
      FloatBuffer x(nw), y(nw), w(static_cast<size_t>(W)), mean(static_cast<size_t>(N)),
          rstd(static_cast<size_t>(N));
      const double s = median_seconds(9, [&] {
        layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), N, W);
      });
      c.memory_bandwidth_gbs = 2.0 * N * W * 4 / s / 1e9;
      c.elementwise_efficiency = 1.0;
    }
    omp_set_num_threads(saved);
    c.sources["device.gemm"] = stamp + "; fp32, one thread (per core), the model's forward shapes";
    c.sources["device.kernels.attention_flops"] = stamp + "; causal forward + backward, one thread";
    c.sources["device.kernels.adamw_per_param"] = stamp + "; one thread";
    c.sources["device.memory_bandwidth_gbs"] = stamp + "; LayerNorm forward read + write, all cores";
    c.sources["device.memory_gib"] = stamp + "; MemAvailable / ranks per node";
  }
  world.barrier();

  // Collectives between the ranks (all-gather and all-reduce, 4 KiB .. 16 MiB): t = alpha steps + beta bytes
  // by least squares over the bus bytes. One rank: nothing to measure (declared shared-memory defaults).
  NetworkLevel intra;
  intra.name = "intra";
  intra.span = "node";
  intra.topology = "full";
  const int P = world.size();
  if (P > 1) {
    std::vector<double> xs_steps, xs_bytes, ys;
    FloatBuffer send(static_cast<size_t>(4) << 20),
        recv(static_cast<size_t>(P) * (static_cast<size_t>(4) << 20));
    for (size_t floats = 1024; floats <= (size_t(4) << 20); floats *= 4) {
      const double ag = median_seconds(
          5, [&] { world.all_gather(send.data(), recv.data(), floats, DType::f32); }, &world);
      const double ar = median_seconds(
          5, [&] { world.all_reduce(send.data(), floats, DType::f32); }, &world);
      const double b = double(floats) * 4;
      xs_steps.push_back(P - 1), xs_bytes.push_back(b * (P - 1)), ys.push_back(ag);
      xs_steps.push_back(2.0 * (P - 1)), xs_bytes.push_back(2 * b * (P - 1) / P), ys.push_back(ar);
    }
    // Least squares for y = alpha * s + beta * x (two unknowns, normal equations).
    double ss = 0, sx = 0, xx = 0, sy = 0, xy = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
      ss += xs_steps[i] * xs_steps[i], sx += xs_steps[i] * xs_bytes[i], xx += xs_bytes[i] * xs_bytes[i];
      sy += xs_steps[i] * ys[i], xy += xs_bytes[i] * ys[i];
    }
    const double det = ss * xx - sx * sx;
    const double alpha = std::max(0.0, (sy * xx - sx * xy) / det),
                 beta = std::max(1e-12, (ss * xy - sx * sy) / det);
    intra.latency_us = alpha * 1e6;
    intra.bandwidth_gbs = 1.0 / beta / 1e9;
    intra.efficiency = 1.0;
    c.sources["level.intra"] =
        fmt::format("{}; all-gather and all-reduce over {} ranks, 4 KiB-16 MiB, least squares", stamp, P);
  } else {
    intra.latency_us = 5;
    intra.bandwidth_gbs = 5;
    c.sources["level.intra"] = "assumed (one rank: no collective measured; shared-memory copy defaults)";
  }
  c.levels.push_back(intra);
  // Overlap on 2 shared cores (README: 0.32 of the gradient communication completed during the backward
  // with 25 MB buckets); nothing else overlaps on the CPU.
  c.overlap = {{"dp_grads", 0.32}, {"zero3_gather", 0.3}, {"ring_kv", 0.3}};
  c.sources["overlap"] = "assumed (README's overlap benchmark on 2 shared cores: 0.32 with 25 MB buckets)";
  return c;
}

}  // namespace odyssey
