// Byte and time accounting of collectives, per kind and per level, in the bus-byte convention of
// nccl-tests (see communicator.h). Reported in the metrics as DESIGN.md defines.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/core/tensor_view.h"

namespace odyssey {

enum class CommKind { all_reduce, reduce_scatter, all_gather, all_to_all, send_recv, broadcast };
const char* comm_kind_name(CommKind kind);

struct CommCounter {
  uint64_t calls = 0;
  uint64_t bytes = 0;    // bus bytes per rank
  double seconds = 0.0;  // wall time inside the call (or from start to wait() for async)
};

// One call as the trace keeps it (planner.md §9.1): count elements of dtype in the call's own
// convention (all-reduce and broadcast the buffer, all-gather / reduce-scatter / all-to-all one rank's
// block, send and receive the message).
struct CommTraceRecord {
  std::string group;
  CommKind kind;
  bool intra_node;
  uint64_t count;
  DType dtype;
  uint64_t bus_bytes;
};

class CommStats {
 public:
  // Off by default (ODYSSEY_COMM_TRACE=1 in the environment turns it on): when on, every call is also
  // appended to the trace, which to_json reports as "trace" and reset() clears.
  CommStats();
  void set_trace(bool on);
  std::vector<CommTraceRecord> trace() const;

  // While one is alive, record() on this thread does nothing (add_time still counts). A communication
  // thread mutes the calls it runs for a ThreadedCommunicator, which recorded them when they were
  // issued: bytes then fall in the caller's accounting windows, whatever the thread's timing.
  class MutedOnThisThread {
   public:
    MutedOnThisThread();
    ~MutedOnThisThread();
    MutedOnThisThread(const MutedOnThisThread&) = delete;
    MutedOnThisThread& operator=(const MutedOnThisThread&) = delete;
  };

  // group: the name of the communicator the call ran on (the grid's "tp", "dp", ...).
  void record(const std::string& group, CommKind kind, bool intra_node, uint64_t bus_bytes, double seconds,
              uint64_t count = 0, DType dtype = DType::u8);
  void add_time(const std::string& group, CommKind kind, bool intra_node, double seconds);
  void reset();
  uint64_t total_bytes() const;
  uint64_t bytes(bool intra_node) const;
  uint64_t bytes(CommKind kind) const;
  uint64_t bytes(CommKind kind, bool intra_node) const;
  uint64_t group_bytes(const std::string& group) const;
  uint64_t group_bytes(const std::string& group, CommKind kind) const;
  // {"total_bytes", "intra_node_bytes", "inter_node_bytes", "seconds", "by_kind": {kind: {...}},
  //  "by_group": {group: {"bytes", "seconds", "calls"}}}
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mutex_;
  struct Key {
    CommKind kind;
    bool intra_node;
    std::string group;
    auto operator<=>(const Key&) const = default;
  };
  std::map<Key, CommCounter> counters_;
  bool tracing_ = false;
  std::vector<CommTraceRecord> trace_;
};

}  // namespace odyssey
