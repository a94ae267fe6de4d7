// Console logging: one place that decides where human-readable progress goes (stderr), so stdout
// stays clean for JSON results (eval, bench) and generated text.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <utility>

namespace odyssey {

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, format, std::forward<Args>(args)...);
  std::fputc('\n', stderr);
}

}  // namespace odyssey
