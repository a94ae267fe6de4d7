// attention_forward / attention_backward and their bf16-policy forms: the fast kernel's path for this
// CPU (attention_isa.h), chosen at every call so tests and benchmarks can force one with
// ODYSSEY_ATTN_ISA. Both policies choose among the same paths; the avx512_bf16 path's fp32 entries are
// the avx512 path's (attention_isa.h).
#include "odyssey/kernels/attention.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/kernels/attention_isa.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/isa_choice.h"

namespace odyssey {
namespace {

using attention_paths::Path;

struct CompiledPath {
  const Path* path;
  bool runs_here;  // the CPU (and the OS) support its ISA
};

// Widest first.
const std::vector<CompiledPath>& compiled_paths() {
  static const std::vector<CompiledPath> paths = [] {
    std::vector<CompiledPath> p;
#if ODYSSEY_ATTN_X86_PATHS
    const CpuInfo& cpu = cpu_info();
    static const Path avx512_bf16 = [] {
      Path both = attention_paths::avx512_bf16;
      both.forward = attention_paths::avx512.forward;
      both.backward = attention_paths::avx512.backward;
      return both;
    }();
    p.push_back({&avx512_bf16, cpu.avx512f && cpu.avx512_bf16});
    p.push_back({&attention_paths::avx512, cpu.avx512f});
    p.push_back({&attention_paths::avx2, cpu.avx2 && cpu.fma});
#endif
    p.push_back({&attention_paths::portable, true});
    return p;
  }();
  return paths;
}

// The widest path this CPU runs, or the one ODYSSEY_ATTN_ISA names.
const Path& current_path() {
  return choose_isa_path(compiled_paths(), "ODYSSEY_ATTN_ISA", "an attention path");
}

}  // namespace

const char* attention_isa() {
  return current_path().name;
}

std::vector<std::string> attention_isas_supported() {
  std::vector<std::string> names;
  for (const CompiledPath& p : compiled_paths())
    if (p.runs_here) names.push_back(p.path->name);
  return names;
}

void attention_forward(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                       AttentionDims dims, AttentionMask mask, float scale) {
  current_path().forward(out, lse, q, k, v, dims, mask, scale);
}

void attention_backward(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout, HeadsView out,
                        const float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims,
                        AttentionMask mask, float scale) {
  current_path().backward(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
}

void attention_forward_bf16(MutHeadsView out, float* lse, Bf16HeadsView q, Bf16HeadsView k, Bf16HeadsView v,
                            AttentionDims dims, AttentionMask mask, float scale) {
  current_path().forward_bf16(out, lse, q, k, v, dims, mask, scale);
}

void attention_forward_bf16(MutBf16HeadsView out, float* lse, Bf16HeadsView q, Bf16HeadsView k,
                            Bf16HeadsView v, AttentionDims dims, AttentionMask mask, float scale) {
  current_path().forward_bf16_out(out, lse, q, k, v, dims, mask, scale);
}

void attention_backward_bf16(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, Bf16HeadsView dout,
                             Bf16HeadsView out, const float* lse, Bf16HeadsView q, Bf16HeadsView k,
                             Bf16HeadsView v, AttentionDims dims, AttentionMask mask, float scale) {
  current_path().backward_bf16(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
}

void attention_forward_bf16(MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                            AttentionDims dims, AttentionMask mask, float scale) {
  current_path().forward_bf16_of_fp32(out, lse, q, k, v, dims, mask, scale);
}

void attention_backward_bf16(MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout, HeadsView out,
                             const float* lse, HeadsView q, HeadsView k, HeadsView v, AttentionDims dims,
                             AttentionMask mask, float scale) {
  current_path().backward_bf16_of_fp32(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
}

void attention_forward(bool bf16, MutHeadsView out, float* lse, HeadsView q, HeadsView k, HeadsView v,
                       AttentionDims dims, AttentionMask mask, float scale) {
  if (bf16)
    attention_forward_bf16(out, lse, q, k, v, dims, mask, scale);
  else
    attention_forward(out, lse, q, k, v, dims, mask, scale);
}

void attention_backward(bool bf16, MutHeadsView dq, MutHeadsView dk, MutHeadsView dv, HeadsView dout,
                        HeadsView out, const float* lse, HeadsView q, HeadsView k, HeadsView v,
                        AttentionDims dims, AttentionMask mask, float scale) {
  if (bf16)
    attention_backward_bf16(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
  else
    attention_backward(dq, dk, dv, dout, out, lse, q, k, v, dims, mask, scale);
}

}  // namespace odyssey
