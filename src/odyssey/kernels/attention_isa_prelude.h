// Every header from outside the kernel that attention_schedule.h and attention_tiles.h include: a path's
// translation unit includes this before its target pragma (see attention_isa.h). Keep the lists equal.
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "odyssey/core/bf16.h"
#include "odyssey/core/error.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/attention_isa.h"
#include "odyssey/kernels/attention_workspace.h"
