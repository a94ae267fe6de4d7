// The hardware's peak fp32 rate, the denominator of MFU (model FLOPs utilisation):
//   peak per core = FMA width in fp32 lanes x 2 (an FMA is two FLOPs) x FMA units x clock.
// Each factor comes from the CPU itself and says where it came from (`odyssey info` prints them):
// the FMA datapath from cpuid (vendor, family, model, ISA flags) and a table of the cores we know, the
// clock as the highest of what the kernel reports (sysfs cpufreq's maximum, /proc/cpuinfo's MHz) and
// a measured clock (a chain of dependent adds, one per cycle, best of many short samples, so a busy
// moment cannot lower it), the cores as the physical cores this process may run on. Where a factor is
// uncertain the larger choice is taken: the peak is meant as an upper bound, so MFU cannot exceed 1
// because a factor was guessed low.
#pragma once

#include <string>
#include <vector>

#include "odyssey/kernels/cpu_info.h"

namespace odyssey {

// The FMA datapath of one core: units x bits each (Zen 1: 2 x 128; Zen 2-4: 2 x 256, Zen 4 runs
// AVX-512 as two 256-bit halves; Zen 5 and AVX-512 Xeons: 2 x 512).
struct FmaDatapath {
  int bits = 128;
  int units = 2;
  std::string source;  // which rule chose it
};

// The datapath of a CPU described by cpuid's fields.
FmaDatapath fma_datapath(const CpuInfo& cpu);

// Peak fp32 GFLOP/s of one core with this datapath at this clock.
double peak_gflops_per_core(const FmaDatapath& fma, double ghz);

// The highest "cpu MHz" in /proc/cpuinfo's text, in GHz (0 if none), and the clock in a brand string
// ("... @ 2.10GHz", 0 if none).
double max_cpuinfo_ghz(const std::string& proc_cpuinfo);
double brand_string_ghz(const std::string& brand);

// The clock measured by timing a chain of dependent integer adds (x86; 0 elsewhere): the best of
// `samples` runs of about 0.5 ms each.
double measured_clock_ghz(int samples = 40);

// Physical cores among the CPUs this process may run on (sched_getaffinity, sysfs topology: SMT
// siblings count once), and on the whole host (online CPUs).
int physical_cores_allowed();
int physical_cores_online();

// This host's peak: every factor, where it came from, and the product.
struct CpuPeak {
  FmaDatapath fma;
  double ghz = 0;
  std::string clock_source;  // "measured", "sysfs cpuinfo_max_freq", "/proc/cpuinfo", "brand string"
  int cores_allowed = 1;     // physical cores this process may use
  int cores_online = 1;      // physical cores of the host
  double per_core_gflops() const { return peak_gflops_per_core(fma, ghz); }
};

// Read once and cached (the clock measurement takes ~20 ms).
const CpuPeak& cpu_peak();

}  // namespace odyssey
