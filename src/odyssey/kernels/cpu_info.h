// What CPU this process runs on and which instruction sets the kernels use, so that benchmarks record
// it and ISA-specific paths can be chosen from the host (machines differ: AVX2-only AMD, AVX-512/AMX
// Intel).
#pragma once

#include <string>

namespace odyssey {

struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string model;   // the brand string, e.g. "AMD EPYC 7B12" (a VM may shorten it to "AMD EPYC")
  int family = 0, model_number = 0;  // cpuid's display family and model: tell CPU generations apart
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512_bf16 = false;
  bool amx_bf16 = false;  // also requires the OS to enable AMX tile state (checked via XCR0)
};

// Read once from cpuid (x86) and cached; empty fields elsewhere.
const CpuInfo& cpu_info();

// The instruction set oneDNN dispatches to on this host ("avx2", "avx512_core", "avx512_core_amx", ...).
std::string onednn_isa();

// The widest vector ISA Odyssey's own kernels were compiled for ("avx512", "avx2", "sse" or
// "generic"); the build uses -march=native, so it is the host's.
std::string kernels_isa();

}  // namespace odyssey
