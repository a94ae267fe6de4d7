// Metrics: one JSON object per line per logged step (DESIGN.md), appended with write(2) as it goes so
// a crashed run keeps everything up to its last step. A failed write (a full disk) is an error, and
// the file keeps only whole lines.
#pragma once

#include <sys/types.h>

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
  int fd_ = -1;
  off_t good_bytes_ = 0;  // the file's size after the last complete line
};

}  // namespace odyssey
