// Metrics: one JSON object per line per logged step (DESIGN.md), appended and flushed as it goes so a
// crashed run keeps everything up to its last step.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace odyssey {

class MetricsWriter {
 public:
  // append: keep existing lines (a resumed run); otherwise the file starts empty.
  MetricsWriter(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace odyssey
