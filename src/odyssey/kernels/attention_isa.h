// The compiled paths of the fast attention kernel (attention.cpp picks one per call): the blockwise
// algorithm of attention_schedule.h over attention_tiles.h's micro-tiles of one vector width, each in
// its own translation unit compiled for its ISA with a target pragma, so every x86 build carries the
// AVX-512 and AVX2 paths whatever the build machine and the CPU chooses at run time.
//
// A path's translation unit includes attention_isa_prelude.h, then opens the target pragma, then the
// kernel headers: everything from outside the kernel (the standard library, fmt, OpenMP) is parsed
// before the pragma and stays compiled for the build's baseline ISA. Otherwise a wider copy of a
// shared inline function (std::fill, say) could be the one the linker keeps, and fault on a CPU
// without that ISA.
//
// Every path also carries the kernel under the bf16 policy (attention.h: attention_forward_bf16):
// BlockwiseAttention<Tiles, bf16>, the same schedule and tiles over bf16 views, with P and dS rounded to
// bf16 before the products that read them. On these fp32 tiles that is bf16 storage with fp32 compute
// (mixed-precision.md §5.5) and, bit for bit, the bf16 emulation of §9 for the path's summation order.
//
// The bf16 dot-product path (§5.4), attention_avx512_bf16.cpp under target("avx512f,avx512bf16"):
// BlockwiseAttention<Bf16DotTiles, bf16> — the same schedule (online softmax, LSE, masks, scaling, the
// P / dS rounding, task split, fixed summation order) with tiles whose products are VDPBF16PS over
// operands packed into bf16 pairs as each product starts (attention_tiles_bf16.h); accumulators fp32.
// Its results differ from the other paths' bf16 entries (the emulation) by summation order only. It has
// no fp32 products: attention.cpp gives it the avx512 path's fp32 entries (the same functions, so fp32
// calls are bitwise those of the avx512 path) and lists it first where cpu_info().avx512_bf16.
// An AMX path would be another Tiles type (B tiles are 16 rows x 32 bf16 in the same pair layout; the
// process must be granted tile data with arch_prctl(ARCH_REQ_XCOMP_PERM) before the first tile
// instruction; cpu_info().amx_bf16 checks that the OS saves tile state).
#pragma once

#include "odyssey/kernels/attention.h"

// Target pragmas are GCC's; other compilers (clang for the fuzz build) get the portable path only.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define ODYSSEY_ATTN_X86_PATHS 1
#else
#define ODYSSEY_ATTN_X86_PATHS 0
#endif

namespace odyssey::attention_paths {

struct Path {
  const char* name;  // "avx512_bf16", "avx512", "avx2", "portable" (ODYSSEY_ATTN_ISA)
  void (*forward)(MutHeadsView, float*, HeadsView, HeadsView, HeadsView, AttentionDims, AttentionMask, float);
  void (*backward)(MutHeadsView, MutHeadsView, MutHeadsView, HeadsView, HeadsView, const float*, HeadsView,
                   HeadsView, HeadsView, AttentionDims, AttentionMask, float);
  // The bf16 policy's entries (attention_forward_bf16 with an fp32 or a bf16 out, backward).
  void (*forward_bf16)(MutHeadsView, float*, Bf16HeadsView, Bf16HeadsView, Bf16HeadsView, AttentionDims,
                       AttentionMask, float);
  void (*forward_bf16_out)(MutBf16HeadsView, float*, Bf16HeadsView, Bf16HeadsView, Bf16HeadsView,
                           AttentionDims, AttentionMask, float);
  void (*backward_bf16)(MutHeadsView, MutHeadsView, MutHeadsView, Bf16HeadsView, Bf16HeadsView, const float*,
                        Bf16HeadsView, Bf16HeadsView, Bf16HeadsView, AttentionDims, AttentionMask, float);
  // The same over fp32 views, rounded to bf16 as they are read.
  void (*forward_bf16_of_fp32)(MutHeadsView, float*, HeadsView, HeadsView, HeadsView, AttentionDims,
                               AttentionMask, float);
  void (*backward_bf16_of_fp32)(MutHeadsView, MutHeadsView, MutHeadsView, HeadsView, HeadsView, const float*,
                                HeadsView, HeadsView, HeadsView, AttentionDims, AttentionMask, float);
};

// The Path of a kernel pair: BlockwiseAttention<Tiles> and BlockwiseAttention<Tiles, bf16>; of a bf16
// kernel alone (null fp32 entries).
template <class Bf16Kernel>
constexpr Path make_bf16_path(const char* name) {
  return {name,
          nullptr,
          nullptr,
          &Bf16Kernel::template forward<MutHeadsView>,
          &Bf16Kernel::template forward<MutBf16HeadsView>,
          &Bf16Kernel::template backward<>,
          &Bf16Kernel::template forward<MutHeadsView, HeadsView>,
          &Bf16Kernel::template backward<HeadsView>};
}
template <class Fp32Kernel, class Bf16Kernel>
constexpr Path make_path(const char* name) {
  Path p = make_bf16_path<Bf16Kernel>(name);
  p.forward = &Fp32Kernel::template forward<MutHeadsView>;
  p.backward = &Fp32Kernel::template backward<>;
  return p;
}

#if ODYSSEY_ATTN_X86_PATHS
extern const Path avx512_bf16;  // avx512's tiles with VDPBF16PS products; bf16 entries only (see above)
extern const Path avx512;       // 16-float vectors, 6 x 4 micro-tiles; needs AVX-512F
extern const Path avx2;         // 8-float vectors, 6 x 2 micro-tiles; needs AVX2 and FMA
#endif
extern const Path portable;  // 4-float vectors, 6 x 2 micro-tiles; the build's baseline ISA

}  // namespace odyssey::attention_paths
