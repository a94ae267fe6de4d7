#include "odyssey/kernels/cpu_peak.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace odyssey {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The (package, core) of a logical CPU, or (-1, cpu) when sysfs does not say (each CPU its own core).
std::pair<long, long> core_of(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  const std::string package = read_file(dir + "physical_package_id"), core = read_file(dir + "core_id");
  if (package.empty() || core.empty()) return {-1, cpu};
  return {std::atol(package.c_str()), std::atol(core.c_str())};
}

int physical_cores_of(const cpu_set_t& set) {
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cores.insert(core_of(cpu));
  return std::max<int>(1, int(cores.size()));
}

}  // namespace

FmaDatapath fma_datapath(const CpuInfo& c) {
  const int widest = c.avx512f ? 512 : c.avx2 ? 256 : 128;
  if (!c.fma) return {widest, 1, "no FMA: one multiply-add pair per cycle at the widest vector"};
  const bool amd = c.vendor == "AuthenticAMD" || c.vendor == "HygonGenuine";
  if (amd && c.family == 0x17 && c.model_number < 0x30)
    return {128, 2, "AMD Zen 1 (family 23, model < 0x30): 2 x 128-bit FMA"};
  if (amd && (c.family == 0x17 || c.family == 0x19))
    return {256, 2, "AMD Zen 2-4 (family 23-25): 2 x 256-bit FMA (Zen 4 runs AVX-512 as two halves)"};
  if (amd && c.family == 0x1a) return {widest, 2, "AMD Zen 5 (family 26): 2 FMA units at the widest vector"};
  // Intel and the rest: two FMA units at the widest vector the OS enables (an upper bound: some
  // AVX-512 parts have one 512-bit unit).
  return {widest, 2, "2 FMA units at the widest vector (upper bound)"};
}

double peak_gflops_per_core(const FmaDatapath& fma, double ghz) {
  return (fma.bits / 32) * 2.0 * fma.units * ghz;
}

double max_cpuinfo_ghz(const std::string& text) {
  double best = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) best = std::max(best, std::atof(line.c_str() + colon + 1) / 1e3);
  }
  return best;
}

double brand_string_ghz(const std::string& brand) {
  const auto at = brand.rfind('@');
  if (at == std::string::npos) return 0;
  const double v = std::atof(brand.c_str() + at + 1);
  return brand.find("GHz", at) != std::string::npos   ? v
         : brand.find("MHz", at) != std::string::npos ? v / 1e3
                                                      : 0;
}

double measured_clock_ghz(int samples) {
#if defined(__x86_64__)
  using clock = std::chrono::steady_clock;
  double best = 0;
  for (int s = 0; s < samples; ++s) {
    unsigned long acc = 0, step = 1, n = 50000;  // 8 dependent adds per iteration: 400K cycles
    const auto t0 = clock::now();
    const unsigned long iterations = n;
    __asm__ volatile(
        "1:\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "dec %1\n\tjnz 1b\n\t"
        : "+r"(acc), "+r"(n)
        : "r"(step)
        : "cc");
    const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
    if (seconds > 0) best = std::max(best, 8.0 * double(iterations) / seconds / 1e9);
  }
  return best;
#else
  (void)samples;
  return 0;
#endif
}

int physical_cores_allowed() {
  cpu_set_t own;
  CPU_ZERO(&own);
  if (sched_getaffinity(0, sizeof(own), &own) != 0) return 1;
  return physical_cores_of(own);
}

int physical_cores_online() {
  cpu_set_t all;
  CPU_ZERO(&all);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  for (long cpu = 0; cpu < std::min<long>(n, CPU_SETSIZE); ++cpu) CPU_SET(int(cpu), &all);
  return physical_cores_of(all);
}

const CpuPeak& cpu_peak() {
  static const CpuPeak peak = [] {
    CpuPeak p;
    p.fma = fma_datapath(cpu_info());
    // The highest clock any source reports: the peak is an upper bound.
    const std::pair<double, const char*> clocks[] = {
        {measured_clock_ghz(), "measured (dependent adds, best of 40)"},
        {std::atof(read_file("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").c_str()) / 1e6,
         "sysfs cpuinfo_max_freq"},
        {max_cpuinfo_ghz(read_file("/proc/cpuinfo")), "/proc/cpuinfo cpu MHz"},
        {brand_string_ghz(cpu_info().model), "brand string"}};
    for (const auto& [ghz, source] : clocks)
      if (ghz > p.ghz) p.ghz = ghz, p.clock_source = source;
    p.cores_allowed = physical_cores_allowed();
    p.cores_online = physical_cores_online();
    return p;
  }();
  return peak;
}

}  // namespace odyssey
