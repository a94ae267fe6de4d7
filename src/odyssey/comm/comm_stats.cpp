#include "odyssey/comm/comm_stats.h"

#include <cstdlib>
#include <cstring>

namespace odyssey {

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::all_reduce:
      return "all_reduce";
    case CommKind::reduce_scatter:
      return "reduce_scatter";
    case CommKind::all_gather:
      return "all_gather";
    case CommKind::all_to_all:
      return "all_to_all";
    case CommKind::send_recv:
      return "send_recv";
    case CommKind::broadcast:
      return "broadcast";
  }
  return "unknown";
}

CommStats::CommStats() {
  const char* env = std::getenv("ODYSSEY_COMM_TRACE");
  tracing_ = env && std::strcmp(env, "1") == 0;
}

void CommStats::set_trace(bool on) {
  std::lock_guard lock(mutex_);
  tracing_ = on;
}

std::vector<CommTraceRecord> CommStats::trace() const {
  std::lock_guard lock(mutex_);
  return trace_;
}

namespace {
thread_local int muted_on_this_thread = 0;
}

CommStats::MutedOnThisThread::MutedOnThisThread() {
  ++muted_on_this_thread;
}

CommStats::MutedOnThisThread::~MutedOnThisThread() {
  --muted_on_this_thread;
}

void CommStats::record(const std::string& group, CommKind kind, bool intra_node, uint64_t bus_bytes,
                       double seconds, uint64_t count, DType dtype) {
  if (muted_on_this_thread) return;
  std::lock_guard lock(mutex_);
  if (tracing_) trace_.push_back({group, kind, intra_node, count, dtype, bus_bytes});
  CommCounter& c = counters_[{kind, intra_node, group}];
  c.calls += 1;
  c.bytes += bus_bytes;
  c.seconds += seconds;
}

void CommStats::add_time(const std::string& group, CommKind kind, bool intra_node, double seconds) {
  std::lock_guard lock(mutex_);
  counters_[{kind, intra_node, group}].seconds += seconds;
}

void CommStats::reset() {
  std::lock_guard lock(mutex_);
  counters_.clear();
  trace_.clear();
}

uint64_t CommStats::total_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [key, c] : counters_) total += c.bytes;
  return total;
}

uint64_t CommStats::bytes(bool intra_node) const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [key, c] : counters_)
    if (key.intra_node == intra_node) total += c.bytes;
  return total;
}

uint64_t CommStats::bytes(CommKind kind, bool intra_node) const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [key, c] : counters_)
    if (key.kind == kind && key.intra_node == intra_node) total += c.bytes;
  return total;
}

uint64_t CommStats::group_bytes(const std::string& group) const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [key, c] : counters_)
    if (key.group == group) total += c.bytes;
  return total;
}

uint64_t CommStats::group_bytes(const std::string& group, CommKind kind) const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [key, c] : counters_)
    if (key.group == group && key.kind == kind) total += c.bytes;
  return total;
}

uint64_t CommStats::bytes(CommKind kind) const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [key, c] : counters_)
    if (key.kind == kind) total += c.bytes;
  return total;
}

nlohmann::json CommStats::to_json() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0, intra = 0, inter = 0;
  double seconds = 0.0;
  nlohmann::json by_kind = nlohmann::json::object(), by_group = nlohmann::json::object();
  for (const auto& [key, c] : counters_) {
    total += c.bytes;
    (key.intra_node ? intra : inter) += c.bytes;
    seconds += c.seconds;
    // Both levels of one kind fold into one entry, with the split kept inside it.
    nlohmann::json& k = by_kind[comm_kind_name(key.kind)];
    if (k.is_null())
      k = {{"calls", 0}, {"bytes", 0}, {"intra_node_bytes", 0}, {"inter_node_bytes", 0}, {"seconds", 0.0}};
    k["calls"] = k["calls"].get<uint64_t>() + c.calls;
    k["bytes"] = k["bytes"].get<uint64_t>() + c.bytes;
    const char* level = key.intra_node ? "intra_node_bytes" : "inter_node_bytes";
    k[level] = k[level].get<uint64_t>() + c.bytes;
    k["seconds"] = k["seconds"].get<double>() + c.seconds;
    nlohmann::json& g = by_group[key.group.empty() ? "unnamed" : key.group];
    if (g.is_null()) g = {{"calls", 0}, {"bytes", 0}, {"seconds", 0.0}};
    g["calls"] = g["calls"].get<uint64_t>() + c.calls;
    g["bytes"] = g["bytes"].get<uint64_t>() + c.bytes;
    g["seconds"] = g["seconds"].get<double>() + c.seconds;
  }
  nlohmann::json out = {{"total_bytes", total}, {"intra_node_bytes", intra}, {"inter_node_bytes", inter},
                        {"seconds", seconds},   {"by_kind", by_kind},        {"by_group", by_group}};
  if (tracing_) {
    nlohmann::json calls = nlohmann::json::array();
    for (const CommTraceRecord& r : trace_)
      calls.push_back({{"group", r.group.empty() ? "unnamed" : r.group},
                       {"kind", comm_kind_name(r.kind)},
                       {"level", r.intra_node ? "intra" : "inter"},
                       {"count", r.count},
                       {"dtype", enum_name(kDTypeNames, r.dtype)},
                       {"bus_bytes", r.bus_bytes}});
    out["trace"] = std::move(calls);
  }
  return out;
}

}  // namespace odyssey
