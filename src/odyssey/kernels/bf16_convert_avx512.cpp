// The bf16 conversion's avx512 path: bf16_convert_lanes.h on 16-lane vectors, compiled for avx512f
// whatever the build machine (bf16_convert_isa.h); bf16_convert.cpp runs it only on a CPU that has it.
#include "odyssey/kernels/bf16_convert_prelude.h"

#if ODYSSEY_BF16_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx512f")

#include "odyssey/kernels/bf16_convert_lanes.h"

namespace odyssey::bf16_paths {

using L = bf16_lanes::Lanes<16>;
// Constant-initialised: no start-up code compiled for this ISA runs before the CPU is checked.
constinit const Bf16ConvertPath avx512{"avx512", &L::nearest, &L::stochastic, &L::widen};

}  // namespace odyssey::bf16_paths

#pragma GCC pop_options
#endif
