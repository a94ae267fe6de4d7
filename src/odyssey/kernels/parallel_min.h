// From how many elements a bandwidth-bound elementwise loop runs on OpenMP threads: below this,
// starting the threads costs more than they save.
#pragma once

#include <cstddef>

namespace odyssey {

inline constexpr size_t kParallelMinElements = size_t{1} << 15;

}  // namespace odyssey
