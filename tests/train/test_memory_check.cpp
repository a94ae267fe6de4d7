// The start-up memory check: refuses exactly when the accounted need exceeds the budget, names the
// keys and the numbers, and reads MemAvailable from a meminfo file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "odyssey/core/error.h"
#include "odyssey/core/host_memory.h"
#include "odyssey/train/memory_check.h"

namespace odyssey {
namespace {

constexpr uint64_t GiB = uint64_t{1} << 30;

HostMemoryNeed need(uint64_t state, uint64_t activations, int ranks) {
  HostMemoryNeed n;
  n.state_per_rank = state;
  n.activations_per_rank = activations;
  n.ranks_on_host = ranks;
  n.seq_len = 262144;
  n.tokens_per_rank = 65536;
  n.micro_batch = 1;
  return n;
}

std::string message(const HostMemoryNeed& n, double budget_gb, uint64_t available) {
  try {
    check_host_memory(n, budget_gb, available);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryCheck, AvailableMemoryMustHoldEveryRanksStateAndActivations) {
  // 4 ranks x (3 GiB of state + 5 GiB of activations) = 32 GiB. MemAvailable is read before the state
  // exists (most of it is mapped lazily and would not show), so the state counts.
  EXPECT_EQ(message(need(3 * GiB, 5 * GiB, 4), 0, 32 * GiB), "");
  EXPECT_TRUE(fits_host_memory(need(3 * GiB, 5 * GiB, 4), 0, 32 * GiB));
  EXPECT_FALSE(fits_host_memory(need(3 * GiB, 5 * GiB, 4), 0, 32 * GiB - 1));
  // The activations alone would fit: the state is what does not.
  const std::string m = message(need(3 * GiB, 5 * GiB, 4), 0, 30 * GiB);
  EXPECT_NE(m.find("train.seq_len 262144 x train.micro_batch 1 does not fit on this host"), std::string::npos)
      << m;
  EXPECT_NE(m.find("4 rank(s) x 5.00 GiB of activations (65536 tokens per rank, memory.checkpoint = none) + "
                   "3.00 GiB of model state per rank = 32.00 GiB, but 30.00 GiB is available"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("MemAvailable"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.sp_ulysses"), std::string::npos) << m;
  // Unknown available memory: nothing to check against.
  EXPECT_EQ(message(need(3 * GiB, 500 * GiB, 4), 0, 0), "");
}

TEST(MemoryCheck, BudgetCountsStateAndActivations) {
  // 2 ranks x (1 + 3) GiB = 8 GiB against train.host_memory_gb.
  EXPECT_EQ(message(need(1 * GiB, 3 * GiB, 2), 8.0, 1), "");
  const std::string m = message(need(1 * GiB, 3 * GiB, 2), 7.5, 100 * GiB);
  EXPECT_NE(
      m.find("+ 1.00 GiB of model state per rank = 8.00 GiB, but 7.50 GiB is train.host_memory_gb = 7.5"),
      std::string::npos)
      << m;
}

TEST(HostMemory, ReadsMemAvailableFromMeminfo) {
  const std::string path = testing::TempDir() + "/meminfo";
  {
    std::ofstream f(path);
    f << "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\nBuffers: 1 "
         "kB\n";
  }
  EXPECT_EQ(available_memory_bytes(path), uint64_t{20000000} * 1024);
  {
    std::ofstream f(path);
    f << "MemTotal:       24576000 kB\n";
  }
  EXPECT_EQ(available_memory_bytes(path), 0u);
  EXPECT_EQ(available_memory_bytes(testing::TempDir() + "/no-such-meminfo"), 0u);
  std::remove(path.c_str());
  EXPECT_GT(available_memory_bytes(), 0u);  // this Linux host
}

}  // namespace
}  // namespace odyssey
