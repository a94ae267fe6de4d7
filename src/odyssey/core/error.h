// Errors: every failure a user can cause is an odyssey::Error whose message names what is wrong
// (the config key, the file, the offset). Apps catch it, print it and exit non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace odyssey {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace odyssey

// ODY_CHECK(cond, "format", args...): throw odyssey::Error with the message when cond is false.
#define ODY_CHECK(cond, ...)                   \
  do {                                         \
    if (!(cond)) ::odyssey::fail(__VA_ARGS__); \
  } while (0)
