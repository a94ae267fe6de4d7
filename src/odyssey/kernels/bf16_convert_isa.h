// The compiled paths of the bf16 conversion (bf16_convert.h), each in its own translation unit under a
// target pragma (as the attention kernel's, attention_isa.h): bf16_convert_avx512_bf16.cpp,
// bf16_convert_avx512.cpp, bf16_convert_avx2.cpp; the portable path lives in bf16_convert.cpp. A path's
// translation unit includes bf16_convert_prelude.h before its pragma.
#pragma once

#include "odyssey/kernels/bf16_convert.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define ODYSSEY_BF16_X86_PATHS 1
#else
#define ODYSSEY_BF16_X86_PATHS 0
#endif

namespace odyssey::bf16_paths {

#if ODYSSEY_BF16_X86_PATHS
extern const Bf16ConvertPath avx512_bf16;  // needs AVX-512F and AVX512_BF16
extern const Bf16ConvertPath avx512;       // needs AVX-512F
extern const Bf16ConvertPath avx2;         // needs AVX2
#endif
extern const Bf16ConvertPath portable;  // the build's baseline ISA

}  // namespace odyssey::bf16_paths
