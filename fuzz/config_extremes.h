// What the structure-aware config fuzzer (fuzz_config_keys.cpp) and the property test
// (tests/train/test_config_extremes.cpp) drive the run configuration with: the keys of the key table
// (read from the table itself: run_config_to_json of the defaults), the extreme integers of issue 42,
// and two small base models (GPT-2 and Llama) whose dry run is quick.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "odyssey/train/config.h"

namespace odyssey::fuzz {

// Every key of the table ("section.key") with its default value; the JSON type of the default says the
// key's type (integer, number, bool, string or choice, list of integers).
inline const std::vector<std::pair<std::string, nlohmann::json>>& config_keys() {
  static const std::vector<std::pair<std::string, nlohmann::json>> keys = [] {
    std::vector<std::pair<std::string, nlohmann::json>> out;
    const nlohmann::json defaults = run_config_to_json(RunConfig{});  // alive through the loop
    for (const auto& [section, entries] : defaults.items())
      for (const auto& [key, value] : entries.items()) out.emplace_back(section + "." + key, value);
    return out;
  }();
  return keys;
}

// The extremes every integer key is driven through (as --set text: 2^64 is no int64): -1, 0, 1, the
// edges of 32- and 64-bit integers, and the powers of two between.
inline const std::vector<std::string>& extreme_integers() {
  static const std::vector<std::string> values = [] {
    std::vector<std::string> v = {
        "-1", "0", "1", "2147483647", "2147483648", "9223372036854775807", "18446744073709551616"};
    for (int k : {2, 4, 8, 12, 16, 20, 24, 30, 32, 40, 48, 62}) v.push_back(std::to_string(uint64_t{1} << k));
    return v;
  }();
  return values;
}

// The small models the dry runs start from: GPT-2, or Llama (with grouped-query heads and its own
// d_ff), of the same size and training setup; the caller appends a [data] train shard and a [checkpoint]
// dir.
enum class BaseModel { gpt2, llama };
inline const char* base_model_name(BaseModel model) {
  return model == BaseModel::llama ? "llama" : "gpt2";
}
inline std::string base_config(BaseModel model) {
  const bool llama = model == BaseModel::llama;
  return std::string("[model]\narch = \"") + base_model_name(model) + "\"\n" +
         "n_layer = 2\nn_head = 4\nd_model = 32\nseq_len = 32\nvocab_size = 256\n" +
         (llama ? "n_kv_head = 2\nd_ff = 64\n" : "") +
         "\n[train]\nsteps = 1\nglobal_batch = 4\nmicro_batch = 2\nthreads = 1\n";
}

}  // namespace odyssey::fuzz
