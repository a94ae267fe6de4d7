// The host record every benchmark (and `odyssey info`) puts in its JSON ("host": {...}), so figures from
// different machines are never compared by accident: CPU model and features, the ISA oneDNN dispatched to,
// the ISA Odyssey's kernels were built for, the attention kernel's path, and the thread count.
#pragma once

#include <omp.h>

#include <nlohmann/json.hpp>

#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/cpu_info.h"

namespace odyssey {

inline nlohmann::json host_json(int threads = omp_get_max_threads()) {
  const CpuInfo& c = cpu_info();
  return {{"cpu", c.model},
          {"vendor", c.vendor},
          {"family", c.family},
          {"model_number", c.model_number},
          {"avx2", c.avx2},
          {"avx512f", c.avx512f},
          {"amx_bf16", c.amx_bf16},
          {"onednn_isa", onednn_isa()},
          {"kernels_isa", kernels_isa()},
          {"attention_isa", attention_isa()},  // the attention kernel's path (kernels/attention.h)
          {"threads", threads}};
}

}  // namespace odyssey
