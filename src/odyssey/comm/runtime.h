// The MPI runtime every rank runs in: start-up, the world communicator, the host layout, and
// failure behaviour. An error on any one rank ends the whole job at once with that rank's message
// (MPI_Abort), because the other ranks would otherwise wait forever in their next collective.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "odyssey/comm/communicator.h"

namespace odyssey {

// MPI_Init_thread asking for MPI_THREAD_MULTIPLE, requiring MPI_THREAD_FUNNELED (the main thread calls
// MPI; OpenMP threads compute; a communication thread, comm/comm_thread.h, needs MULTIPLE). Works as a single
// rank without mpirun (Open MPI singleton). Registers finalize_runtime() to run at exit. Calling it again is
// a no-op.
void init_runtime(int& argc, char**& argv);
bool runtime_initialized();
// Whether MPI gave MPI_THREAD_MULTIPLE (threads beside the main one may call MPI).
bool runtime_thread_multiple();
// Frees the world communicator and calls MPI_Finalize; safe to call more than once.
void finalize_runtime();

// All ranks of the job (an MPI_COMM_WORLD duplicate); intra_node when every rank is on one host.
Communicator& world();

// Prints "<program>: rank R: error: <message>" (without "rank R: " for a single rank) to stderr
// and ends every rank of the job with exit code 1.
[[noreturn]] void abort_job(const std::string& message);

// Wraps an app's main: initialises the runtime, runs body, finalises, returns its exit code. An
// exception escaping body on any rank becomes abort_job(what()). program prefixes error messages.
int run_main(int argc, char** argv, const std::function<int(int, char**)>& body,
             const std::string& program = "odyssey");

// Where this rank lives: hosts grouped as MPI sees shared memory (MPI_Comm_split_type SHARED),
// nodes numbered by their lowest rank. Collective over comm. A non-MPI communicator is one host.
struct HostLayout {
  int node = 0;
  int num_nodes = 1;
  int local_rank = 0;  // index among the ranks of comm on this host
  int local_size = 1;
  std::vector<int> nodes;  // node of every rank of comm, by rank
};
HostLayout host_layout(const Communicator& comm);

// OpenMP threads a rank should use: the cores this host gives the job (the union of the ranks'
// CPU affinity masks) divided by the ranks of world on the host, capped by this rank's own mask
// (when mpirun binds ranks to cores), at least 1. Collective over world.
int default_threads_per_rank(const Communicator& world);

}  // namespace odyssey
