// Helpers shared by the data-layer tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "odyssey/core/error.h"

namespace odyssey::testing_data {

// A fresh directory under the system temp dir, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ody_data_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// fn must throw odyssey::Error whose message contains every part.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << message << "\nlacks: " << part;
    return;
  }
  ADD_FAILURE() << "no odyssey::Error thrown";
}

}  // namespace odyssey::testing_data
