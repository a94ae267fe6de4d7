// MFU, model FLOPs utilisation: the model's FLOPs per second (6 x matmul parameters + attention, per
// token, times tokens per second) over the peak of the hardware the job runs on. The peak is the
// per-core peak of kernels/cpu_peak.h times the cores each rank can use, summed over the ranks, or a
// stated rate per rank (train.gemm_gflops). Never above 1, by construction: a model rate above the
// peak proves a factor of the peak wrong, so the peak is raised to that rate and the meter says so.
#pragma once

#include <string>

#include "odyssey/comm/communicator.h"

namespace odyssey {

class MfuMeter {
 public:
  // peak_gflops: the job's peak; 0 when unknown (MFU then reads 0).
  explicit MfuMeter(double peak_gflops) : peak_gflops_(peak_gflops) {}

  // Model FLOP/s over the peak, in [0, 1].
  double mfu(double model_flops_per_s);

  double peak_gflops() const { return peak_gflops_; }
  bool raised() const { return raised_; }  // a model rate exceeded the stated or computed peak

 private:
  double peak_gflops_;
  bool raised_ = false;
};

// Cores a rank computes on: its threads, capped by the physical cores its affinity mask allows and by
// its share of the host's physical cores (ranks oversubscribing a host share its cores).
double rank_cores(int threads, int cores_allowed, int cores_online, int ranks_on_host);

// The job's peak in GFLOP/s (collective over world): stated_per_rank x world size when stated > 0,
// else the sum over ranks of rank_cores x the per-core peak. `how` describes it for the log.
double job_peak_gflops(Communicator& world, int threads, double stated_per_rank, std::string* how);

}  // namespace odyssey
