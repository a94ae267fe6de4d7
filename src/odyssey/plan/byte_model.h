// The byte model (planner.md §5): the collectives one rank issues in one optimizer step, as an ordered
// list of records, each with the bus bytes CommStats would count for it (comm/bus_bytes.h) and the
// level of its group (§5.4). Every size comes from the engine's own sizing code: the stage's ParamTable
// and unit schedule, the Partition's padded segments, the wire formats' record sizes, UlyssesHeads.
// Totals are sums of the list. No MPI, no model state.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/comm/comm_stats.h"
#include "odyssey/plan/layout.h"

namespace odyssey {

// What a collective is for (the §12 "by_purpose" split and the time model's overlap classes).
enum class CommPurpose { grads, weights, zero3_gather, sp, tp, pp, scalars };
const char* comm_purpose_name(CommPurpose p);

struct CommRecord {
  const char* phase = "";  // "fwd", "bwd", "step", "scalars"
  int micro = -1;          // micro-step (-1: once per step)
  std::string what;        // "bucket 2", "unit 5", "layer 3", "loss", ...
  CommKind kind = CommKind::all_reduce;
  std::string group;  // the engine's communicator name
  int group_size = 1;
  int group_nodes = 1;  // nodes the group spans (its members per node: group_size / group_nodes)
  bool intra = true;    // CommStats' level: all members on one node
  uint64_t count = 0;   // elements of dtype per the call's own convention
  const char* dtype = "f32";
  uint64_t bus_bytes = 0;  // per rank per call, nccl-tests convention
  uint64_t repeat = 1;     // identical calls in a row (a ring's P - 1 passes): one record
  CommPurpose purpose = CommPurpose::scalars;
  int node_ranks = 1;  // ranks per node of the layout: the copies of this call sharing a node's NIC
  uint64_t quantized_elements = 0;  // fp32 elements this rank encodes or decodes for the call
};

// The step's records of world rank `rank`, in the order its pipeline actions issue them (pp = 1 is a
// one-stage pipeline, as in the engine). exact: fails naming what the model does not reproduce from the
// engine (byte_model_gap); else such layouts are planned as their nearest covered form (query-chunked
// Ulysses as whole-sequence Ulysses).
std::vector<CommRecord> comm_schedule(const PlanLayout& layout, int rank, bool exact = true);
// Why comm_schedule(exact) would refuse this layout; empty when it reproduces the engine.
std::string byte_model_gap(const PlanLayout& layout);

// Calls and bus bytes summed per (group, kind, level): the grain CommStats keeps.
struct CommTotalsKey {
  std::string group;
  CommKind kind;
  bool intra;
  auto operator<=>(const CommTotalsKey&) const = default;
};
struct CommTotalsValue {
  uint64_t calls = 0, bytes = 0;
};
using CommTotals = std::map<CommTotalsKey, CommTotalsValue>;
CommTotals comm_totals(const std::vector<CommRecord>& records);
// CommStats::to_json's layout ({"total_bytes", "intra_node_bytes", "inter_node_bytes", "by_kind",
// "by_group"}, without seconds), so a prediction and a measurement compare key by key.
nlohmann::json comm_totals_json(const CommTotals& totals);
nlohmann::json comm_record_json(const CommRecord& r);

}  // namespace odyssey
