// One sequence-parallel attention layer, forward + backward, at long sequence lengths. Run under
// mpirun with the world as the SP group, one sequence length per run (peak RSS is per process):
//   mpirun -np 4 build/bench/bench_sp mode=ring T=32768 heads=12 head_dim=64
// mode: ulysses (U = P), ring (R = P), usp (U = 2, R = P/2); layout: zigzag | contiguous.
// Prints one JSON object on rank 0: time per forward+backward (slowest rank, median of iters),
// per-rank peak RSS (max over ranks) and the attention tensors this rank holds (inputs, outputs,
// gradients and Ulysses' saved head-sharded activations), bytes per rank by collective, and for
// the ring the same layer without overlap (each transfer waited for before its block computes),
// so the overlap is a ratio measured in the same run.
#include <omp.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "odyssey/comm/grid.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"
#include "odyssey/core/rng.h"
#include "odyssey/core/timer.h"
#include "odyssey/parallel/usp_attention.h"

#include "odyssey/train/host_info.h"

namespace odyssey {
namespace {

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// key=value arguments.
std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"mode", "ring"}, {"layout", "zigzag"}, {"T", "8192"},
                                          {"heads", "12"},  {"head_dim", "64"},   {"batch", "1"},
                                          {"iters", "3"}};
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    ODY_CHECK(eq != std::string::npos && a.count(s.substr(0, eq)), "bench_sp: unknown argument '{}'", s);
    a[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return a;
}

double max_over(Communicator& w, double x) {
  std::vector<float> all(size_t(w.size()));
  const float mine = float(x);
  w.all_gather(&mine, all.data(), 1, DType::f32);
  return *std::max_element(all.begin(), all.end());
}

int run(int argc, char** argv) {
  auto a = parse(argc, argv);
  Communicator& w = world();
  const int P = w.size(), T = std::stoi(a["T"]), H = std::stoi(a["heads"]), D = std::stoi(a["head_dim"]),
            B = std::stoi(a["batch"]), iters = std::stoi(a["iters"]);
  const std::string mode = a["mode"];
  int U = 1, R = P;
  if (mode == "ulysses") U = P, R = 1;
  if (mode == "usp") U = std::min(2, P), R = P / U;
  ODY_CHECK(mode == "ulysses" || mode == "ring" || mode == "usp", "bench_sp: mode '{}'", mode);
  const long rss_start = peak_rss_kb();
  // The host's cores split over the ranks, so every P uses the same machine.
  const int threads = default_threads_per_rank(w);
  omp_set_num_threads(threads);

  ProcessGrid grid(w, {.sp_ulysses = U, .sp_ring = R});
  SpAttentionOptions opt{parse_enum(kRingLayoutNames, a["layout"], "--layout")};
  SequenceParallelAttention op(grid.sp_ulysses(), grid.sp_ring(), opt);
  const int Tl = int(shard_positions(T, op.shard()).size());
  const size_t C = size_t(H) * D, N = size_t(B) * Tl;
  FloatBuffer qkv(N * 3 * C), out(N * C), lse(size_t(B) * H * Tl), dout(N * C), dqkv(N * 3 * C);
  philox_fill_normal(qkv.data(), qkv.size(), 0.0f, 1.0f, 1, uint64_t(w.rank()));
  philox_fill_normal(dout.data(), dout.size(), 0.0f, 1.0f, 2, uint64_t(w.rank()));

  // Median time of forward + backward (slowest rank), after one warm-up.
  AttentionSavedPtr saved;  // what the op keeps for the layer's backward (reused across iterations)
  auto layer = [&](bool overlap) {
    if (op.ring()) op.ring()->set_overlap(overlap);
    std::vector<double> times;
    for (int i = 0; i <= iters; ++i) {
      w.barrier();
      if (i == 1) {
        w.stats().reset();
        if (op.ring()) op.ring()->reset_times();
      }
      Timer t;
      op.forward(out.data(), lse.data(), qkv.data(), B, Tl, H, D, saved);
      dqkv.zero();
      op.backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, Tl, H, D, saved.get());
      if (i > 0) times.push_back(max_over(w, t.seconds()));
    }
    std::sort(times.begin(), times.end());
    nlohmann::json j = {{"ms", times[times.size() / 2] * 1e3}};
    if (op.ring()) {
      j["ring_compute_ms"] = max_over(w, op.ring()->times().compute / iters * 1e3);
      j["ring_wait_ms"] = max_over(w, op.ring()->times().wait / iters * 1e3);
    }
    return j;
  };
  nlohmann::json timing = layer(true);
  const uint64_t a2a = w.stats().bytes(CommKind::all_to_all) / uint64_t(iters),
                 p2p = w.stats().bytes(CommKind::send_recv) / uint64_t(iters);
  const double tensors = double(qkv.bytes() + out.bytes() + lse.bytes() + dout.bytes() + dqkv.bytes() +
                                (saved ? saved->bytes() : 0));
  nlohmann::json result = {{"bench", "sp_attention"},
                           {"host", odyssey::host_json()},
                           {"mode", mode},
                           {"layout", a["layout"]},
                           {"ranks", P},
                           {"ulysses", U},
                           {"ring", R},
                           {"T", T},
                           {"T_local", Tl},
                           {"batch", B},
                           {"heads", H},
                           {"head_dim", D},
                           {"threads_per_rank", threads},
                           {"fwd_bwd_ms", timing["ms"]},
                           {"peak_rss_mb", max_over(w, double(peak_rss_kb()) / 1024)},
                           {"rss_before_mb", max_over(w, double(rss_start) / 1024)},
                           {"attention_tensors_mb", max_over(w, tensors / (1 << 20))},
                           {"bytes_per_rank", {{"all_to_all", a2a}, {"send_recv", p2p}}},
                           // The all-to-all buffers themselves (bus bytes are (U-1)/U of them).
                           {"a2a_buffer_bytes_per_rank", U > 1 ? a2a * uint64_t(U) / uint64_t(U - 1) : 0}};
  if (op.ring() && R > 1) {
    const nlohmann::json serial = layer(false);
    result["overlap"] = {{"overlapped_ms", timing["ms"]},
                         {"overlapped_wait_ms", timing["ring_wait_ms"]},
                         {"overlapped_compute_ms", timing["ring_compute_ms"]},
                         {"serialized_ms", serial["ms"]},
                         {"serialized_wait_ms", serial["ring_wait_ms"]},
                         {"serialized_compute_ms", serial["ring_compute_ms"]}};
  }
  if (w.rank() == 0) std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace odyssey

int main(int argc, char** argv) {
  return odyssey::run_main(argc, argv, odyssey::run, "bench_sp");
}
