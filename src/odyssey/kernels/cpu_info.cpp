#include "odyssey/kernels/cpu_info.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace odyssey {

namespace {

#if defined(__x86_64__) || defined(__i386__)
bool bit(unsigned reg, int b) {
  return (reg >> b) & 1u;
}

unsigned long long xcr0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

CpuInfo read_cpu_info() {
  CpuInfo c;
  unsigned a, b, cx, d;
  if (!__get_cpuid(0, &a, &b, &cx, &d)) return c;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &cx, 4);
  c.vendor = vendor;

  __get_cpuid(1, &a, &b, &cx, &d);
  const int base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  c.family = base_family == 0xf ? base_family + int((a >> 20) & 0xff) : base_family;
  c.model_number =
      base_family == 0x6 || base_family == 0xf ? base_model | int(((a >> 16) & 0xf) << 4) : base_model;
  const bool osxsave = bit(cx, 27);
  c.fma = bit(cx, 12);
  // The OS must save the YMM (bits 1-2) and ZMM (bits 5-7) state for AVX2 / AVX-512 to be usable.
  const unsigned long long xcr = osxsave ? xcr0() : 0;
  const bool ymm_os = (xcr & 0x6) == 0x6, zmm_os = (xcr & 0xe6) == 0xe6;
  const bool amx_os = (xcr & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &cx, &d);
    c.avx2 = ymm_os && bit(b, 5);
    c.avx512f = zmm_os && bit(b, 16);
    c.avx512bw = zmm_os && bit(b, 30);
    c.amx_bf16 = amx_os && bit(d, 22);
    __get_cpuid_count(7, 1, &a, &b, &cx, &d);
    c.avx512_bf16 = zmm_os && bit(a, 5);
  }
  if (!ymm_os) c.fma = false;

  char brand[49] = {};
  if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &a, &b, &cx, &d);
      std::memcpy(brand + 16 * leaf, &a, 4);
      std::memcpy(brand + 16 * leaf + 4, &b, 4);
      std::memcpy(brand + 16 * leaf + 8, &cx, 4);
      std::memcpy(brand + 16 * leaf + 12, &d, 4);
    }
  }
  std::string model = brand;
  // Brand strings are padded with spaces on both sides.
  const auto first = model.find_first_not_of(' ');
  const auto last = model.find_last_not_of(' ');
  c.model = first == std::string::npos ? "" : model.substr(first, last - first + 1);
  return c;
}
#else
CpuInfo read_cpu_info() {
  return {};
}
#endif

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = read_cpu_info();
  return info;
}

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_all:
      return "all";
    default:
      return "unknown";
  }
}

std::string kernels_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__SSE2__)
  return "sse";
#else
  return "generic";
#endif
}

}  // namespace odyssey
