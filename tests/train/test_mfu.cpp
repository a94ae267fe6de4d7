// MFU never exceeds 1 (a rate above the peak raises the peak and says so), the cores a rank counts,
// and the progress line's elapsed time and ETA.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "odyssey/comm/single_communicator.h"
#include "odyssey/train/mfu.h"
#include "odyssey/train/progress.h"

using namespace odyssey;

TEST(Mfu, RatioOfPeakBelowThePeak) {
  MfuMeter meter(100.0);  // GFLOP/s
  EXPECT_DOUBLE_EQ(meter.mfu(25e9), 0.25);
  EXPECT_FALSE(meter.raised());
  EXPECT_DOUBLE_EQ(meter.peak_gflops(), 100.0);
}

TEST(Mfu, ARateAboveThePeakRaisesIt) {
  MfuMeter meter(20.8);  // a peak stated too low, as a GEMM rate measured in a busy moment was
  EXPECT_DOUBLE_EQ(meter.mfu(82.4e9), 1.0);
  EXPECT_TRUE(meter.raised());
  EXPECT_DOUBLE_EQ(meter.peak_gflops(), 82.4);
  EXPECT_DOUBLE_EQ(meter.mfu(41.2e9), 0.5);  // later steps against the raised peak
}

TEST(Mfu, NeverAboveOneForAnyRates) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log_rate(6, 13);
  for (int trial = 0; trial < 100; ++trial) {
    MfuMeter meter(std::pow(10.0, log_rate(rng) - 9));
    for (int step = 0; step < 50; ++step) {
      const double mfu = meter.mfu(std::pow(10.0, log_rate(rng)));
      ASSERT_GE(mfu, 0.0);
      ASSERT_LE(mfu, 1.0);
    }
  }
}

TEST(Mfu, UnknownPeakReadsZero) {
  MfuMeter meter(0.0);
  EXPECT_DOUBLE_EQ(meter.mfu(1e9), 0.0);
}

TEST(Mfu, CoresARankCounts) {
  EXPECT_DOUBLE_EQ(rank_cores(2, 2, 2, 1), 2.0);  // one rank, two threads, two cores
  EXPECT_DOUBLE_EQ(rank_cores(1, 1, 2, 2), 1.0);  // two ranks bound to a core each
  EXPECT_DOUBLE_EQ(rank_cores(1, 2, 2, 4), 0.5);  // four ranks oversubscribing two cores
  EXPECT_DOUBLE_EQ(rank_cores(8, 2, 2, 1), 2.0);  // threads beyond the cores add no peak
  EXPECT_DOUBLE_EQ(rank_cores(2, 1, 2, 1), 1.0);  // a rank bound to one core
}

TEST(Mfu, StatedPeakPerRank) {
  SingleCommunicator world("world");
  std::string how;
  EXPECT_DOUBLE_EQ(job_peak_gflops(world, 2, 50.0, &how), 50.0);
  EXPECT_NE(how.find("train.gemm_gflops"), std::string::npos);
  EXPECT_GT(job_peak_gflops(world, 1, 0.0, &how), 0.0);
  EXPECT_NE(how.find("GFLOP/s per core"), std::string::npos);
}

TEST(Progress, DurationFormat) {
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(-1), "0s");
}

TEST(Progress, EtaOnlyForRunsLongerThanAMinute) {
  const Progress short_run(0, 10);
  EXPECT_EQ(short_run.line_at(5, 5.0), "");  // 10 s in all
  const Progress long_run(0, 100);
  EXPECT_EQ(long_run.line_at(10, 20.0), " | elapsed 20s, ETA 3m00s");  // 2 s per step, 90 left
  EXPECT_EQ(long_run.line_at(100, 200.0), " | elapsed 3m20s, ETA 0s");
  const Progress resumed(40, 100);  // steps before the resume do not count
  EXPECT_EQ(resumed.line_at(50, 30.0), " | elapsed 30s, ETA 2m30s");
  EXPECT_EQ(resumed.line_at(40, 0.0), "");
}
