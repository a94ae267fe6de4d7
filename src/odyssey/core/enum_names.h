// Names of an enum's values, for config keys and records: a value is parsed once from its name (an
// unknown name is an error that lists the choices) and the code then compares enums, not strings.
//   enum class Fruit { apple, pear };
//   inline constexpr EnumNames<Fruit, 2> kFruitNames = {{{"apple", Fruit::apple}, {"pear", Fruit::pear}}};
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "odyssey/core/error.h"

namespace odyssey {

template <typename E>
struct EnumName {
  const char* name;
  E value;
};
template <typename E, size_t N>
using EnumNames = std::array<EnumName<E>, N>;

template <typename E, size_t N>
const char* enum_name(const EnumNames<E, N>& names, E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

// "a, b, c" (an empty name shown as "")
template <typename E, size_t N>
std::string enum_choices(const EnumNames<E, N>& names) {
  std::string out;
  for (const EnumName<E>& n : names)
    out += (out.empty() ? "" : ", ") + std::string(*n.name ? n.name : "\"\"");
  return out;
}

// The value called text; fails naming what (a config key) and the choices.
template <typename E, size_t N>
E parse_enum(const EnumNames<E, N>& names, std::string_view text, std::string_view what) {
  for (const EnumName<E>& n : names)
    if (text == n.name) return n.value;
  fail("{}: unknown value '{}' ({})", what, text, enum_choices(names));
}

}  // namespace odyssey
