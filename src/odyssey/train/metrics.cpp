#include "odyssey/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "odyssey/core/error.h"

namespace odyssey {

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  ODY_CHECK(file_, "log.metrics: cannot open {}: {}", path, std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  ODY_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size(), "cannot write metrics to {}",
            path_);
  std::fflush(file_);
}

}  // namespace odyssey
