// Helpers shared by the checkpoint-layer tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "odyssey/core/error.h"

namespace odyssey::testing_checkpoint {

// The message of the odyssey::Error that f() throws; a test failure if it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an odyssey::Error";
  return "";
}

}  // namespace odyssey::testing_checkpoint

#define EXPECT_HAS(msg, needle) \
  EXPECT_NE((msg).find(needle), std::string::npos) << "'" << (needle) << "' not in: " << (msg)
