#include "odyssey/train/mfu.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "odyssey/comm/runtime.h"
#include "odyssey/kernels/cpu_peak.h"

namespace odyssey {

double MfuMeter::mfu(double model_flops_per_s) {
  if (peak_gflops_ <= 0 || model_flops_per_s <= 0) return 0.0;
  const double gflops = model_flops_per_s / 1e9;
  if (gflops > peak_gflops_) {
    peak_gflops_ = gflops;
    raised_ = true;
  }
  return std::min(1.0, gflops / peak_gflops_);
}

double rank_cores(int threads, int cores_allowed, int cores_online, int ranks_on_host) {
  const double share = double(std::max(1, cores_online)) / double(std::max(1, ranks_on_host));
  return std::min({double(std::max(1, threads)), double(std::max(1, cores_allowed)), share});
}

double job_peak_gflops(Communicator& world, int threads, double stated_per_rank, std::string* how) {
  if (stated_per_rank > 0) {
    if (how) *how = fmt::format("{:.1f} GFLOP/s per rank (train.gemm_gflops)", stated_per_rank);
    return stated_per_rank * world.size();
  }
  const CpuPeak& p = cpu_peak();
  const HostLayout host = host_layout(world);
  const double mine = rank_cores(threads, p.cores_allowed, p.cores_online, host.local_size);
  std::vector<double> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), sizeof(double), DType::u8);
  double cores = 0;
  for (double c : all) cores += c;
  if (how)
    *how = fmt::format(
        "{:.1f} cores x {:.1f} GFLOP/s per core ({} fp32 lanes x 2 x {} FMA units x {:.2f} GHz, {}; "
        "odyssey info)",
        cores, p.per_core_gflops(), p.fma.bits / 32, p.fma.units, p.ghz, p.clock_source);
  return cores * p.per_core_gflops();
}

}  // namespace odyssey
