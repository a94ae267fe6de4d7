// Checked integer arithmetic (core/checked_int.h): results within the type are exact, anything beyond is
// an odyssey::Error naming what was combined.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "odyssey/core/checked_int.h"

using namespace odyssey;

namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckedInt, ExactWithinTheType) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(checked_mul(65536, 65536, "a x b"), int64_t{1} << 32);
  EXPECT_EQ(checked_mul(-3, kMax / 3, "a x b"), -(kMax / 3) * 3);
  EXPECT_EQ(checked_add(kMax - 1, 1, "a + b"), kMax);
  EXPECT_EQ(checked_cast<int>(int64_t{2147483647}, "n"), 2147483647);
  EXPECT_EQ(checked_cast<uint64_t>(int64_t{0}, "n"), 0u);
  EXPECT_EQ(checked_bytes(1 << 20, 4, "buffer"), size_t{4} << 20);
}

TEST(CheckedInt, BeyondTheTypeNamesWhatWasCombined) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(error_of([] { checked_mul(int64_t{1} << 32, int64_t{1} << 31, "parallel.tp x parallel.pp"); }),
            "parallel.tp x parallel.pp: 4294967296 x 2147483648 is beyond 64-bit integers");
  EXPECT_EQ(error_of([] { checked_add(kMax, 1, "total"); }),
            "total: 9223372036854775807 + 1 is beyond 64-bit integers");
  EXPECT_EQ(
      error_of([] { checked_cast<int>(int64_t{4294967336}, "config.json: field 'n_embd'"); }),
      "config.json: field 'n_embd': 4294967336 is out of range (must be within -2147483648..2147483647)");
  EXPECT_EQ(error_of([] { checked_cast<uint32_t>(-1, "n"); }),
            "n: -1 is out of range (must be within 0..4294967295)");
  EXPECT_EQ(error_of([] { checked_bytes(-1, 4, "buffer"); }), "buffer: negative count -1");
  EXPECT_NE(error_of([] { checked_bytes(kMax, 4, "buffer"); }), "");
}

}  // namespace
