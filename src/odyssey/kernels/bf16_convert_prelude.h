// Every header from outside the paths that bf16_convert_lanes.h includes: a path's translation unit
// includes this before its target pragma, so these stay compiled for the build's baseline (see
// attention_isa.h). Keep the lists equal.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "odyssey/core/bf16.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/bf16_convert_isa.h"
