#include "odyssey/core/host_memory.h"

#include <fstream>
#include <sstream>

namespace odyssey {

uint64_t available_memory_bytes(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    uint64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") return kib * 1024;
    return 0;
  }
  return 0;
}

}  // namespace odyssey
