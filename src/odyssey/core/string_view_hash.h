// A transparent hash for unordered containers keyed by std::string: find(std::string_view) without
// building a std::string (C++20 heterogeneous lookup; the container also needs std::equal_to<>).
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace odyssey {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace odyssey
