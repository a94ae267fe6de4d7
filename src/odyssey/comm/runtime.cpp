#include "odyssey/comm/runtime.h"

#include <mpi.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <vector>

#include "odyssey/comm/mpi_communicator.h"
#include "odyssey/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace odyssey {

namespace {

// Open MPI keeps what MPI_Init and MPI_Finalize allocate until the process ends, by design. Under
// AddressSanitizer, LeakSanitizer does not track the blocks this thread allocates while one of these
// lives: matching thousands of them against scripts/sanitizers/lsan.supp at exit cost ~1.7 s in
// every process of the sanitizer pass. Nothing otherwise.
#if defined(__SANITIZE_ADDRESS__)
using OpenMpiState = __lsan::ScopedDisabler;
#else
struct OpenMpiState {
  OpenMpiState() {}  // user-provided: a scope object, not an unused variable
};
#endif

std::unique_ptr<MpiCommunicator> g_world;
std::string g_program = "odyssey";
int g_thread_level = MPI_THREAD_SINGLE;

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// Ranks of comm on this host: a communicator the caller frees.
MPI_Comm shared_comm(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm shm = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm);
  return shm;
}

// An exception that escapes everything (a destructor, another thread) still ends the whole job.
void on_terminate() {
  std::string what = "terminate called without an active exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
      what = "unknown exception";
    }
  }
  abort_job(what);
}

}  // namespace

void init_runtime(int& argc, char**& argv) {
  if (g_world) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // MULTIPLE when the library has it (a communication thread may then call MPI beside the main
    // thread: comm/comm_thread.h); the engine itself needs FUNNELED only.
    int provided = 0;
    {
      OpenMpiState untracked;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    }
    if (provided < MPI_THREAD_FUNNELED) abort_job("MPI does not provide MPI_THREAD_FUNNELED");
  }
  MPI_Query_thread(&g_thread_level);
  // A private duplicate, so library traffic never matches messages of other code on WORLD.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int size = 1, local_size = 1;
  MPI_Comm_size(comm, &size);
  MPI_Comm shm = shared_comm(comm);
  MPI_Comm_size(shm, &local_size);
  MPI_Comm_free(&shm);
  g_world = std::make_unique<MpiCommunicator>(comm, "world", local_size == size, true);
  std::set_terminate(on_terminate);
  std::atexit(finalize_runtime);
}

bool runtime_thread_multiple() {
  return g_world && g_thread_level >= MPI_THREAD_MULTIPLE;
}

bool runtime_initialized() {
  return g_world != nullptr;
}

void finalize_runtime() {
  g_world.reset();
  if (mpi_active()) {
    OpenMpiState untracked;
    MPI_Finalize();
  }
}

Communicator& world() {
  ODY_CHECK(g_world, "the MPI runtime is not initialised (call init_runtime first)");
  return *g_world;
}

void abort_job(const std::string& message) {
  int rank = 0, size = 1;
  const bool active = mpi_active();
  if (active) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size > 1) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", g_program.c_str(), rank, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  } else {
    // Alone, a plain exit is enough and avoids Open MPI's abort banner.
    std::fprintf(stderr, "%s: error: %s\n", g_program.c_str(), message.c_str());
    std::fflush(stderr);
    finalize_runtime();
  }
  std::_Exit(1);
}

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body, const std::string& program) {
  g_program = program;
  try {
    init_runtime(argc, argv);
    const int rc = body(argc, argv);
    finalize_runtime();
    return rc;
  } catch (const std::exception& e) {
    abort_job(e.what());
  } catch (...) {
    abort_job("unknown exception");
  }
}

HostLayout host_layout(const Communicator& comm) {
  HostLayout layout;
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&comm);
  layout.nodes.assign(comm.size(), 0);
  if (!mpi) return layout;
  MPI_Comm shm = shared_comm(mpi->handle());
  MPI_Comm_rank(shm, &layout.local_rank);
  MPI_Comm_size(shm, &layout.local_size);
  // The lowest rank of each host numbers the hosts among themselves and tells its host.
  MPI_Comm leaders = MPI_COMM_NULL;
  MPI_Comm_split(mpi->handle(), layout.local_rank == 0 ? 0 : MPI_UNDEFINED, comm.rank(), &leaders);
  int info[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    MPI_Comm_rank(leaders, &info[0]);
    MPI_Comm_size(leaders, &info[1]);
    MPI_Comm_free(&leaders);
  }
  MPI_Bcast(info, 2, MPI_INT, 0, shm);
  MPI_Comm_free(&shm);
  layout.node = info[0];
  layout.num_nodes = info[1];
  // Plain MPI, not the Communicator, so start-up does not show in the byte accounting.
  MPI_Allgather(&layout.node, 1, MPI_INT, layout.nodes.data(), 1, MPI_INT, mpi->handle());
  return layout;
}

int default_threads_per_rank(const Communicator& world) {
  cpu_set_t own;
  CPU_ZERO(&own);
  if (sched_getaffinity(0, sizeof(own), &own) != 0) return 1;
  const int own_count = CPU_COUNT(&own);
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&world);
  if (!mpi) return std::max(1, own_count);
  MPI_Comm shm = shared_comm(mpi->handle());
  int local_size = 1;
  MPI_Comm_size(shm, &local_size);
  std::vector<cpu_set_t> masks(local_size);
  MPI_Allgather(&own, sizeof(own), MPI_BYTE, masks.data(), sizeof(own), MPI_BYTE, shm);
  MPI_Comm_free(&shm);
  cpu_set_t all;
  CPU_ZERO(&all);
  for (auto& m : masks) CPU_OR(&all, &all, &m);
  return std::max(1, std::min(own_count, CPU_COUNT(&all) / local_size));
}

}  // namespace odyssey
