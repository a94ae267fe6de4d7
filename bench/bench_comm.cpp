// Bus bandwidth of all-reduce, reduce-scatter and all-gather over the MPI world, in the nccl-tests
// convention (busbw = bus bytes / time), for buffers of 1 KB to 64 MB. Run under mpirun, e.g.
//   mpirun -np 2 build/bench/bench_comm > comm.json
// Prints one JSON object on rank 0's stdout. Times are averaged over iterations and ranks.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "odyssey/comm/bus_bytes.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/core/timer.h"

#include "odyssey/train/host_info.h"

namespace odyssey {
namespace {

// Seconds per call of op, mean over ranks, after warm-up.
template <typename Op>
double time_op(Communicator& w, size_t bytes, Op&& op) {
  const int iters =
      static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / std::max<size_t>(bytes, 1) / 8, 5, 200));
  for (int i = 0; i < 3; ++i) op();
  w.barrier();
  Timer t;
  for (int i = 0; i < iters; ++i) op();
  float per_call = static_cast<float>(t.seconds() / iters);
  w.all_reduce(&per_call, 1, DType::f32);
  return per_call / w.size();
}

int run(int, char**) {
  Communicator& w = world();
  const int P = w.size();
  nlohmann::json results = nlohmann::json::array();
  for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 4) {
    const size_t count = bytes / 4;     // floats in the full buffer
    const size_t block = count / P;     // per rank for reduce-scatter / all-gather
    const size_t full = block * P * 4;  // the buffer nccl-tests sizes by
    std::vector<float> a(count, 1.0f), b(count, 0.0f);
    struct Case {
      const char* op;
      CommKind kind;
      uint64_t size;
      double seconds;
    };
    const Case cases[] = {
        {"all_reduce", CommKind::all_reduce, count * 4,
         time_op(w, bytes, [&] { w.all_reduce(a.data(), count, DType::f32); })},
        {"reduce_scatter", CommKind::reduce_scatter, full,
         time_op(w, bytes, [&] { w.reduce_scatter(a.data(), b.data(), block, DType::f32); })},
        {"all_gather", CommKind::all_gather, full,
         time_op(w, bytes, [&] { w.all_gather(a.data(), b.data(), block, DType::f32); })},
    };
    for (const Case& c : cases) {
      results.push_back({{"op", c.op},
                         {"bytes", c.size},
                         {"time_us", c.seconds * 1e6},
                         {"algbw_gbs", c.size / c.seconds / 1e9},
                         {"busbw_gbs", bus_bytes(c.kind, c.size, P) / c.seconds / 1e9}});
    }
  }
  if (w.rank() == 0) {
    const nlohmann::json out = {{"bench", "comm"},
                                {"host", odyssey::host_json()},
                                {"ranks", P},
                                {"intra_node", w.intra_node()},
                                {"convention", "nccl-tests bus bytes; time = mean over iterations and ranks"},
                                {"results", results}};
    std::printf("%s\n", out.dump(2).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace odyssey

int main(int argc, char** argv) {
  return odyssey::run_main(argc, argv, odyssey::run, "bench_comm");
}
