// The peak formula (fp32 lanes x 2 x FMA units x GHz per core) on given CPU descriptions, and the
// parsing of the clock sources.
#include <gtest/gtest.h>

#include "odyssey/kernels/cpu_peak.h"

using namespace odyssey;

namespace {

CpuInfo described_cpu(const char* vendor, int family, int model, bool avx2, bool fma, bool avx512) {
  CpuInfo c;
  c.vendor = vendor;
  c.family = family;
  c.model_number = model;
  c.avx2 = avx2;
  c.fma = fma;
  c.avx512f = avx512;
  return c;
}

double peak_of(const CpuInfo& c, double ghz) {
  return peak_gflops_per_core(fma_datapath(c), ghz);
}

}  // namespace

TEST(CpuPeak, FormulaOnKnownCores) {
  // Zen 1 (EPYC 7001): 2 x 128-bit FMA = 8 fp32 FMAs = 16 FLOPs per cycle.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("AuthenticAMD", 23, 1, true, true, false), 3.0), 48.0);
  // Zen 2 (EPYC 7002, model 0x31): 2 x 256-bit = 32 FLOPs per cycle.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("AuthenticAMD", 23, 0x31, true, true, false), 2.5), 80.0);
  // Zen 3 (EPYC 7003, family 25 model 1) at 2.445 GHz.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("AuthenticAMD", 25, 1, true, true, false), 2.445), 32 * 2.445);
  // Zen 4 (EPYC 9004, model 0x11): AVX-512 as two 256-bit halves, still 32 FLOPs per cycle.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("AuthenticAMD", 25, 0x11, true, true, true), 3.7), 32 * 3.7);
  // Zen 5 (EPYC 9005, family 26): 2 x 512-bit = 64 FLOPs per cycle.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("AuthenticAMD", 26, 2, true, true, true), 2.0), 128.0);
  // An AVX-512 Xeon: two 512-bit units (the upper bound).
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("GenuineIntel", 6, 143, true, true, true), 2.5), 160.0);
  // An AVX2 Intel core (Haswell to Alder Lake): 2 x 256.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("GenuineIntel", 6, 0x3f, true, true, false), 3.0), 96.0);
  // No FMA (SSE only): one multiply-add pair of 4 lanes per cycle.
  EXPECT_DOUBLE_EQ(peak_of(described_cpu("GenuineIntel", 6, 0x1a, false, false, false), 2.0), 16.0);
}

TEST(CpuPeak, ClockSources) {
  EXPECT_DOUBLE_EQ(
      max_cpuinfo_ghz("processor\t: 0\ncpu MHz\t\t: 2445.404\nprocessor\t: 1\ncpu MHz\t\t: 3100.000\n"), 3.1);
  EXPECT_DOUBLE_EQ(max_cpuinfo_ghz("processor : 0\n"), 0.0);
  EXPECT_DOUBLE_EQ(brand_string_ghz("Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"), 2.1);
  EXPECT_DOUBLE_EQ(brand_string_ghz("AMD EPYC 7B12"), 0.0);
}

TEST(CpuPeak, ThisHostIsDescribed) {
  const CpuPeak& p = cpu_peak();
  EXPECT_GE(p.cores_allowed, 1);
  EXPECT_GE(p.cores_online, p.cores_allowed);
  EXPECT_GE(p.fma.units, 1);
  EXPECT_FALSE(p.fma.source.empty());
#if defined(__x86_64__)
  // The dependent-add clock is measured on x86: a plausible core clock.
  EXPECT_GT(p.ghz, 0.3);
  EXPECT_LT(p.ghz, 10.0);
  EXPECT_GT(p.per_core_gflops(), 0.0);
#endif
}
