// Typed access to the fields of a JSON file read from outside (Hugging Face config.json, checkpoint
// manifests, safetensors headers): a missing field, a field of the wrong type, or an integer beyond the
// type that holds it is an odyssey::Error naming the file and the field ("<file>: field 'model.n_layer'
// ..."), never a JSON library's exception text nor a silently narrowed value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "odyssey/core/checked_int.h"
#include "odyssey/core/error.h"

namespace odyssey {

// An integer JSON value as T; `where` names the file and the field.
template <typename T>
T json_integer(const nlohmann::json& v, std::string_view where) {
  if (v.is_number_unsigned()) return checked_cast<T>(v.get<uint64_t>(), where);
  if (v.is_number_integer()) return checked_cast<T>(v.get<int64_t>(), where);
  fail("{}: expected an integer, got {}", where, v.dump());
}

// The fields of one JSON object of `file`; `prefix` is the object's own path ("model." for the
// manifest's "model" object), so that errors name the field as the file spells it.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string file, std::string prefix = "")
      : j_(object), file_(std::move(file)), prefix_(std::move(prefix)) {
    ODY_CHECK(j_.is_object(), "{}: {} is not a JSON object", file_,
              prefix_.empty() ? std::string("the document")
                              : "field '" + prefix_.substr(0, prefix_.size() - 1) + "'");
  }

  const std::string& file() const { return file_; }
  // "<file>: field '<prefix><key>'", the start of every message about a field.
  std::string where(std::string_view key) const {
    return fmt::format("{}: field '{}{}'", file_, prefix_, key);
  }
  // Present and not null.
  bool has(std::string_view key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  // A field that must be present (any type).
  const nlohmann::json& at(std::string_view key) const {
    auto it = j_.find(key);
    ODY_CHECK(it != j_.end(), "{} is missing", where(key));
    return *it;
  }
  JsonFields object(std::string_view key) const {
    const nlohmann::json& v = at(key);
    ODY_CHECK(v.is_object(), "{}: expected an object, got {}", where(key), v.dump());
    return JsonFields(v, file_, prefix_ + std::string(key) + ".");
  }
  const nlohmann::json& array(std::string_view key) const {
    const nlohmann::json& v = at(key);
    ODY_CHECK(v.is_array(), "{}: expected an array, got {}", where(key), v.dump());
    return v;
  }
  template <typename T>
  T integer(std::string_view key) const {
    return json_integer<T>(at(key), where(key));
  }
  // Absent or null: the fallback.
  template <typename T>
  T integer_or(std::string_view key, T fallback) const {
    return has(key) ? integer<T>(key) : fallback;
  }
  double number(std::string_view key) const {
    const nlohmann::json& v = at(key);
    ODY_CHECK(v.is_number(), "{}: expected a number, got {}", where(key), v.dump());
    return v.get<double>();
  }
  double number_or(std::string_view key, double fallback) const { return has(key) ? number(key) : fallback; }
  std::string string(std::string_view key) const {
    const nlohmann::json& v = at(key);
    ODY_CHECK(v.is_string(), "{}: expected a string, got {}", where(key), v.dump());
    return v.get<std::string>();
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    return has(key) ? string(key) : std::move(fallback);
  }
  bool boolean(std::string_view key) const {
    const nlohmann::json& v = at(key);
    ODY_CHECK(v.is_boolean(), "{}: expected true or false, got {}", where(key), v.dump());
    return v.get<bool>();
  }
  bool boolean_or(std::string_view key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

 private:
  const nlohmann::json& j_;
  std::string file_, prefix_;
};

}  // namespace odyssey
