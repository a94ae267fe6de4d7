// What the operating system says about this host's memory.
#pragma once

#include <cstdint>
#include <string>

namespace odyssey {

// MemAvailable from /proc/meminfo in bytes (memory that can be allocated without swapping), or 0 when
// it cannot be read (not Linux). `path` is for tests.
uint64_t available_memory_bytes(const std::string& path = "/proc/meminfo");

}  // namespace odyssey
