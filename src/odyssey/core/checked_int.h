// Checked integer arithmetic for integers that come from outside (config keys, fields of files): a
// product or sum that leaves its type, or a value that does not fit the type it is stored in, is an
// odyssey::Error naming what was combined (`what`: the keys or the file and field), never a wrapped
// value, a trap (SIGFPE) or undefined behaviour.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include "odyssey/core/error.h"

namespace odyssey {

// a x b, failing when the product leaves int64_t.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("{}: {} x {} is beyond 64-bit integers", what, a, b);
  return r;
}

// a + b, failing when the sum leaves int64_t.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("{}: {} + {} is beyond 64-bit integers", what, a, b);
  return r;
}

// Whether v (any integer type) is a value of T.
template <typename T, typename V>
constexpr bool fits_in(V v) {
  static_assert(std::is_integral_v<T> && std::is_integral_v<V>);
  return std::in_range<T>(v);
}

// v as T, failing (naming `what` and T's range) when it does not fit: the one narrowing of an outside
// integer into the type that holds it.
template <typename T, typename V>
T checked_cast(V v, std::string_view what) {
  if (!fits_in<T>(v))
    fail("{}: {} is out of range (must be within {}..{})", what, v, std::numeric_limits<T>::min(),
         std::numeric_limits<T>::max());
  return static_cast<T>(v);
}

// count x element_bytes as a byte count (size_t), failing when count is negative or the bytes leave
// size_t (a size derived from outside integers, before anything is allocated or read with it).
inline size_t checked_bytes(int64_t count, size_t element_bytes, std::string_view what) {
  if (count < 0) fail("{}: negative count {}", what, count);
  size_t r = 0;
  if (__builtin_mul_overflow(size_t(count), element_bytes, &r))
    fail("{}: {} x {} bytes is beyond the address space", what, count, element_bytes);
  return r;
}

}  // namespace odyssey
