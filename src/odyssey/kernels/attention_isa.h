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
// Where a bf16 dot-product path goes (§5.4; not built: no CPU of this project's test machines at the
// time had AVX512_BF16 to test it on): a translation unit attention_bf16.cpp under
// target("avx512f,avx512bf16") (plus "amx-tile,amx-bf16" for AMX tiles), a Path whose fp32 entries are
// null, listed first in attention.cpp's compiled_paths() and runnable when cpu_info().avx512_bf16
// (amx_bf16, which already checks that the OS saves tile state; the process must also be granted tile
// data with arch_prctl(ARCH_REQ_XCOMP_PERM) before the first tile instruction). It reuses
// BlockwiseAttention<Tiles, bf16> — online softmax, LSE, masks, scaling, the P / dS rounding, task
// split and the fixed summation order — with a Tiles type whose products read bf16: K^T and V blocks
// packed as bf16 pairs along the reduction dimension (VDPBF16PS takes pairs; AMX B tiles are 16 rows x
// 32 bf16 in the same pair layout), Q and dO packed to bf16 once per call, and P and dS packed as bf16
// pairs after their rounding; accumulators (S, O, dQ, dK, dV) fp32. For that the schedule's pack_rows /
// pack_transposed become Tiles members (the packed element type and layout are the tiles' business).
// Its results then differ from this path's bf16 entries by summation order only (VDPBF16PS adds each
// pair's two exact products), which test_attention_bf16's emulation test is written for. Block sizes
// come from the Tiles type, so AMX's 16 x 32 tiles get 64 x 64 (or 32-multiple) blocks without
// touching the schedule.
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
  const char* name;  // "avx512", "avx2", "portable" (ODYSSEY_ATTN_ISA)
  decltype(&attention_forward) forward;
  decltype(&attention_backward) backward;
  // The bf16 policy's entries (attention_forward_bf16 with an fp32 or a bf16 out, backward).
  void (*forward_bf16)(MutHeadsView, float*, Bf16HeadsView, Bf16HeadsView, Bf16HeadsView, AttentionDims,
                       AttentionMask, float);
  void (*forward_bf16_out)(MutBf16HeadsView, float*, Bf16HeadsView, Bf16HeadsView, Bf16HeadsView,
                           AttentionDims, AttentionMask, float);
  void (*backward_bf16)(MutHeadsView, MutHeadsView, MutHeadsView, Bf16HeadsView, Bf16HeadsView, const float*,
                        Bf16HeadsView, Bf16HeadsView, Bf16HeadsView, AttentionDims, AttentionMask, float);
};

// The Path of a kernel pair: BlockwiseAttention<Tiles> and BlockwiseAttention<Tiles, bf16>.
template <class Fp32Kernel, class Bf16Kernel>
constexpr Path make_path(const char* name) {
  return {name,
          &Fp32Kernel::template forward<MutHeadsView>,
          &Fp32Kernel::backward,
          &Bf16Kernel::template forward<MutHeadsView>,
          &Bf16Kernel::template forward<MutBf16HeadsView>,
          &Bf16Kernel::backward};
}

#if ODYSSEY_ATTN_X86_PATHS
extern const Path avx512;  // 16-float vectors, 6 x 4 micro-tiles; needs AVX-512F
extern const Path avx2;    // 8-float vectors, 6 x 2 micro-tiles; needs AVX2 and FMA
#endif
extern const Path portable;  // 4-float vectors, 6 x 2 micro-tiles; the build's baseline ISA

}  // namespace odyssey::attention_paths
