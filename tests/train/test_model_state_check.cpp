// The model-state check before allocation: a model that cannot fit is refused naming the model keys
// (issue 18: a too-large model failed with a bare std::bad_alloc, also under --dry-run).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "odyssey/core/error.h"
#include "odyssey/train/memory_check.h"

namespace odyssey {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(ModelStateCheck, ZeroStagesShardWhatTheySay) {
  const int64_t p = 1000;
  EXPECT_EQ(min_state_bytes_per_rank(p, 0, 4), 16 * p);
  EXPECT_EQ(min_state_bytes_per_rank(p, 1, 4), 8 * p + 8 * p / 4);
  EXPECT_EQ(min_state_bytes_per_rank(p, 2, 4), 4 * p + 12 * p / 4);
  EXPECT_EQ(min_state_bytes_per_rank(p, 3, 4), 16 * p / 4);
}

TEST(ModelStateCheck, HugeModelSaturatesInsteadOfOverflowing) {
  EXPECT_EQ(min_state_bytes_per_rank(INT64_MAX, 0, 1), UINT64_MAX);
}

TEST(ModelStateCheck, TooLargeModelNamesTheKeys) {
  ModelConfig big;  // GPT-2 124M: ~2 GB of state
  big.n_layer = 12;
  try {
    check_model_state(big, 0, 1, 1, 0, kGiB);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.n_layer 12"), std::string::npos) << m;
    EXPECT_NE(m.find("does not fit on this host"), std::string::npos) << m;
    EXPECT_NE(m.find("available"), std::string::npos) << m;
  }
  // The budget, when set, is what it is checked against.
  EXPECT_THROW(check_model_state(big, 0, 1, 1, 1.0, 1000 * kGiB), Error);
}

TEST(ModelStateCheck, FittingModelAndUnknownMemoryPass) {
  ModelConfig big;
  EXPECT_NO_THROW(check_model_state(big, 0, 1, 1, 0, 64 * kGiB));
  EXPECT_NO_THROW(check_model_state(big, 3, 8, 8, 0, 4 * kGiB));  // 8 ranks x 1/8 of ~2 GB
  EXPECT_NO_THROW(check_model_state(big, 0, 1, 1, 0, 0));         // MemAvailable unknown
}

}  // namespace
}  // namespace odyssey
