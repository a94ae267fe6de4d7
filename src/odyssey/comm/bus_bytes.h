// The bus-byte convention of communicator.h as one function, so every backend (and every test that
// checks the accounting) computes it the same way.
#pragma once

#include <cstdint>

#include "odyssey/comm/comm_stats.h"

namespace odyssey {

// Bus bytes per rank for one call over P ranks. full_bytes is the buffer nccl-tests sizes by: the
// in-place buffer for all-reduce and broadcast, all P blocks for all-gather / reduce-scatter /
// all-to-all, the message for send/recv. Rounded down. A single rank moves nothing.
inline uint64_t bus_bytes(CommKind kind, uint64_t full_bytes, int P) {
  if (P <= 1) return 0;
  const uint64_t p = static_cast<uint64_t>(P);
  switch (kind) {
    case CommKind::all_reduce:
      return full_bytes / p * 2 * (p - 1) + (full_bytes % p) * 2 * (p - 1) / p;
    case CommKind::reduce_scatter:
    case CommKind::all_gather:
    case CommKind::all_to_all:
      return full_bytes / p * (p - 1) + (full_bytes % p) * (p - 1) / p;
    case CommKind::send_recv:
    case CommKind::broadcast:
      return full_bytes;
  }
  return 0;
}

// The bus bytes of one call given in its own convention (comm_stats.h's trace records): count elements of
// elem_size bytes, one rank's block for all-gather / reduce-scatter / all-to-all, the buffer for
// all-reduce and broadcast, the message for send (a receive counts nothing: the sender counts it).
inline uint64_t call_bus_bytes(CommKind kind, uint64_t count, uint64_t elem_size, int P) {
  const bool blocks =
      kind == CommKind::all_gather || kind == CommKind::reduce_scatter || kind == CommKind::all_to_all;
  return bus_bytes(kind, (blocks ? uint64_t(P) : 1) * count * elem_size, P);
}

}  // namespace odyssey
