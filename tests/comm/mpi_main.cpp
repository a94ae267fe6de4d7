// gtest main for multi-rank tests (tests/<layer>/mpitest_*.cpp, run under mpirun): initialises MPI,
// lets only rank 0 print the usual gtest report, prints other ranks' failures with their rank,
// and fails on every rank if any rank failed, so ctest sees the failure whichever rank hit it.
#include <gtest/gtest.h>

#include <cstdio>

#include "odyssey/comm/runtime.h"

namespace {

// Failures of a non-zero rank, which otherwise print nothing.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  odyssey::init_runtime(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  odyssey::Communicator& world = odyssey::world();
  if (world.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank()));
  }
  int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  world.all_reduce(&failed, 1, odyssey::DType::i32);
  if (world.rank() == 0 && failed) std::fprintf(stderr, "%d rank(s) of %d failed\n", failed, world.size());
  odyssey::finalize_runtime();
  return failed ? 1 : 0;
}
