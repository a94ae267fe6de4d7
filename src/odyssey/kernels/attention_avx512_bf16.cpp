// The attention kernel's AVX512_BF16 path: the kernel under the bf16 policy with its products on bf16
// dot products (VDPBF16PS, attention_tiles_bf16.h), everything else the AVX-512 path's. Compiled for
// AVX-512F + AVX512_BF16 whatever the build machine (attention_isa.h); attention.cpp runs it only on a
// CPU that has both. It has no fp32 entries: attention.cpp gives the path the AVX-512 path's.
#include "odyssey/kernels/attention_isa_prelude.h"

#if ODYSSEY_ATTN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bf16")

#include "odyssey/kernels/attention_schedule.h"
#include "odyssey/kernels/attention_tiles_bf16.h"

namespace odyssey::attention_paths {

using Avx512Bf16DotKernel = attention_detail::BlockwiseAttention<attention_tiles::Bf16DotTiles, bf16>;
// Constant-initialised: no start-up code compiled for this ISA runs before the CPU is checked.
constinit const Path avx512_bf16 = make_bf16_path<Avx512Bf16DotKernel>("avx512_bf16");

}  // namespace odyssey::attention_paths

#pragma GCC pop_options
#endif
