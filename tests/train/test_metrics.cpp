// The metrics file: whole JSON lines, appended; a write that fails (a full disk, a file size limit)
// is an error naming the file, and leaves no half-written line behind.
#include "odyssey/train/metrics.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "odyssey/core/error.h"

namespace fs = std::filesystem;
using namespace odyssey;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("odyssey_metrics_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(MetricsTest, AppendsWholeLines) {
  const std::string path = (dir_ / "m.jsonl").string();
  {
    MetricsWriter w(path, false);
    w.write({{"step", 1}});
    w.write({{"step", 2}});
  }
  {
    MetricsWriter w(path, true);  // a resumed run keeps the lines
    w.write({{"step", 3}});
  }
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{R"({"step":1})", R"({"step":2})", R"({"step":3})"}));
  MetricsWriter fresh(path, false);  // a new run starts empty
  EXPECT_TRUE(lines_of(path).empty());
}

TEST_F(MetricsTest, FullDeviceIsAnError) {
  MetricsWriter w("/dev/full", false);
  try {
    w.write({{"step", 1}});
    FAIL() << "a write to /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
}

// A file size limit stops a line half-way, as a full disk does: the error names the file and the
// file is cut back to its complete lines.
TEST_F(MetricsTest, HalfWrittenLineIsCutOff) {
  const std::string path = (dir_ / "m.jsonl").string();
  const std::string pad(40, 'x');
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
  rlimit small = old;
  small.rlim_cur = 200;  // bytes: room for 3 lines and part of the fourth
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  int written = 0;
  {
    MetricsWriter w(path, false);
    try {
      for (; written < 10; ++written) w.write({{"pad", pad}, {"step", written}});
    } catch (const Error& e) {
      message = e.what();
    }
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(written, 3);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& line : lines) EXPECT_TRUE(nlohmann::json::accept(line)) << line;
  EXPECT_EQ(fs::file_size(path), 3 * (lines[0].size() + 1));
}

}  // namespace
