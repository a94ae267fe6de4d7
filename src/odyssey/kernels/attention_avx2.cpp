// The attention kernel's AVX2 path: 8-float vectors in ymm registers, 6 x 2 micro-tiles
// (12 accumulators of 16 registers). Compiled for AVX2 + FMA whatever the build machine
// (attention_isa.h); attention.cpp runs it only on a CPU that has it.
#include "odyssey/kernels/attention_isa_prelude.h"

#if ODYSSEY_ATTN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "odyssey/kernels/attention_schedule.h"
#include "odyssey/kernels/attention_tiles.h"

namespace odyssey::attention_paths {

using Avx2Tiles = attention_tiles::MicroTiles<8, 2>;
using Avx2Kernel = attention_detail::BlockwiseAttention<Avx2Tiles>;
using Avx2Bf16Kernel = attention_detail::BlockwiseAttention<Avx2Tiles, bf16>;
// Constant-initialised: no start-up code compiled for this ISA runs before the CPU is checked.
constinit const Path avx2 = make_path<Avx2Kernel, Avx2Bf16Kernel>("avx2");

}  // namespace odyssey::attention_paths

#pragma GCC pop_options
#endif
