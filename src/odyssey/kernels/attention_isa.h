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
};

#if ODYSSEY_ATTN_X86_PATHS
extern const Path avx512;  // 16-float vectors, 6 x 4 micro-tiles; needs AVX-512F
extern const Path avx2;    // 8-float vectors, 6 x 2 micro-tiles; needs AVX2 and FMA
#endif
extern const Path portable;  // 4-float vectors, 6 x 2 micro-tiles; the build's baseline ISA

}  // namespace odyssey::attention_paths
