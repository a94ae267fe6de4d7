// The attention kernel's AVX-512 path: 16-float vectors in zmm registers, 6 x 4 micro-tiles
// (24 accumulators of 32 registers). Compiled for AVX-512F whatever the build machine
// (attention_isa.h); attention.cpp runs it only on a CPU that has it.
#include "odyssey/kernels/attention_isa_prelude.h"

#if ODYSSEY_ATTN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx512f")

#include "odyssey/kernels/attention_schedule.h"
#include "odyssey/kernels/attention_tiles.h"

namespace odyssey::attention_paths {

using Avx512Tiles = attention_tiles::MicroTiles<16, 4>;
using Avx512Kernel = attention_detail::BlockwiseAttention<Avx512Tiles>;
using Avx512Bf16Kernel = attention_detail::BlockwiseAttention<Avx512Tiles, bf16>;
// Constant-initialised: no start-up code compiled for this ISA runs before the CPU is checked.
constinit const Path avx512 = make_path<Avx512Kernel, Avx512Bf16Kernel>("avx512");

}  // namespace odyssey::attention_paths

#pragma GCC pop_options
#endif
