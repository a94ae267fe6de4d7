// Byte and time accounting of collectives, per kind and per level, in the bus-byte convention of
// nccl-tests (see communicator.h). Reported in the metrics as DESIGN.md defines.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace odyssey {

enum class CommKind { all_reduce, reduce_scatter, all_gather, all_to_all, send_recv, broadcast };
const char* comm_kind_name(CommKind kind);

struct CommCounter {
  uint64_t calls = 0;
  uint64_t bytes = 0;    // bus bytes per rank
  double seconds = 0.0;  // wall time inside the call (or from start to wait() for async)
};

class CommStats {
 public:
  // group: the name of the communicator the call ran on (the grid's "tp", "dp", ...).
  void record(const std::string& group, CommKind kind, bool intra_node, uint64_t bus_bytes, double seconds);
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
};

}  // namespace odyssey
