// Helpers shared by the data-layer tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
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

// The cache of fetched data (scripts/fetch_gpt2_vocab.sh, fetch_tokenizer.sh, fetch_brown.sh):
// $ODYSSEY_CACHE, or <repo>/cache. Vocabularies are not committed; CI fetches them before the tests.
inline std::filesystem::path cache_dir() {
  if (const char* env = std::getenv("ODYSSEY_CACHE"); env != nullptr && *env != '\0') return env;
  return std::filesystem::path(ODYSSEY_TEST_DATA).parent_path().parent_path() / "cache";
}

// s as a JSON string (invalid UTF-8 replaced), cut at 120 characters: text in a failure message.
inline std::string printable(const std::string& s) {
  std::string out = nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return out.size() > 120 ? out.substr(0, 120) + "...\"" : out;
}

// The token ids of parts, in order.
inline std::vector<int> concat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace odyssey::testing_data
