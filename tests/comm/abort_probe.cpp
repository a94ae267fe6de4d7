// Failure-behaviour probe (run by abort.sh under mpirun -np 2): rank 1 throws while the other
// ranks wait in a collective that can never complete. run_main must end the whole job with rank
// 1's message instead of hanging.
#include <cstdlib>
#include <string>

#include "odyssey/comm/runtime.h"
#include "odyssey/core/error.h"

int main(int argc, char** argv) {
  return odyssey::run_main(argc, argv, [](int, char**) {
    odyssey::Communicator& world = odyssey::world();
    const char* who = std::getenv("ODYSSEY_PROBE_RANK");  // the rank that fails (default 1)
    if (world.rank() == (who ? std::atoi(who) : 1))
      odyssey::fail("probe failure on purpose (key parallel.dp)");
    int32_t x = 1;
    world.all_reduce(&x, 1, odyssey::DType::i32);  // rank 1 never joins
    return 0;
  });
}
