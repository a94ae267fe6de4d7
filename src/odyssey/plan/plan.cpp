#include "odyssey/plan/plan.h"

#include <fmt/format.h>

#include <set>

#include "odyssey/core/error.h"
#include "odyssey/model/architecture.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/memory_model.h"
#include "odyssey/plan/stage_cache.h"
#include "odyssey/plan/time_model.h"

namespace odyssey {

int plan_world(const RunConfig& config, const Cluster& cluster) {
  const ParallelConfig& p = config.parallel;
  if (p.dp > 0) return p.dp * p.tp * p.pp * p.sp_ulysses * p.sp_ring;
  return cluster.nodes * cluster.devices_per_node;
}

namespace {

nlohmann::json layout_json(const PlanLayout& layout) {
  const RunConfig& c = layout.config();
  const GridDims& d = layout.dims();
  return {{"world", layout.world()},
          {"ranks_per_node", layout.ranks_per_node()},
          {"nodes", layout.nodes()},
          {"dp", d.dp},
          {"tp", d.tp},
          {"pp", d.pp},
          {"sp_ulysses", d.sp_ulysses},
          {"sp_ring", d.sp_ring},
          {"sp_ring_layout", enum_name(kRingLayoutNames, c.parallel.sp_ring_layout)},
          {"zero_stage", c.parallel.zero_stage},
          {"bucket_mb", c.parallel.bucket_mb},
          {"global_batch", c.train.global_batch},
          {"micro_batch", c.train.micro_batch},
          {"micro_steps", layout.micro_steps()},
          {"seq_len", c.seq_len()},
          {"precision", enum_name(kPrecisionNames, c.train.precision)},
          {"checkpoint", enum_name(kCheckpointPolicyNames, c.memory.checkpoint)},
          {"comm_weights", enum_name(kWeightCommNames, c.comm.weights)},
          {"comm_grads", enum_name(kGradCommNames, c.comm.grads)},
          {"hpz", c.comm.hpz},
          {"grad_pipeline", c.comm.grad_pipeline}};
}

nlohmann::json bytes_json(const std::vector<CommRecord>& records, int64_t params) {
  uint64_t intra = 0, inter = 0;
  double cross_intra = 0, cross_inter = 0;
  nlohmann::json by_kind = nlohmann::json::object(), by_purpose = nlohmann::json::object();
  uint64_t w_intra = 0, w_inter = 0, g_intra = 0, g_inter = 0;
  for (const CommRecord& r0 : records) {
    CommRecord r = r0;  // the record's calls together
    r.bus_bytes *= r.repeat;
    (r.intra ? intra : inter) += r.bus_bytes;
    nlohmann::json& k = by_kind[comm_kind_name(r.kind)];
    if (k.is_null()) k = {{"intra", 0}, {"inter", 0}};
    k[r.intra ? "intra" : "inter"] = k[r.intra ? "intra" : "inter"].get<uint64_t>() + r.bus_bytes;
    const char* purpose = r.purpose == CommPurpose::zero3_gather ? "weights" : comm_purpose_name(r.purpose);
    by_purpose[purpose] = by_purpose.value(purpose, uint64_t(0)) + r.bus_bytes;
    if (r.purpose == CommPurpose::weights || r.purpose == CommPurpose::zero3_gather)
      (r.intra ? w_intra : w_inter) += r.bus_bytes;
    if (r.purpose == CommPurpose::grads) (r.intra ? g_intra : g_inter) += r.bus_bytes;
    const Crossing x = crossing_bytes(r);
    cross_intra += x.intra_per_device;
    cross_inter += x.inter_per_node;
  }
  const double n = params > 0 ? double(params) : 1.0;
  return {{"per_step", {{"intra", intra}, {"inter", inter}, {"total", intra + inter}}},
          {"by_kind", by_kind},
          {"by_purpose", by_purpose},
          {"per_param",
           {{"weights_intra", w_intra / n},
            {"weights_inter", w_inter / n},
            {"grads_intra", g_intra / n},
            {"grads_inter", g_inter / n}}},
          {"crossing", {{"intra_per_device", cross_intra}, {"inter_per_node", cross_inter}}}};
}

// The pipeline stages whose ranks differ: the first, the last, and one middle stage per distinct set of
// chunk layer counts (middle stages of equal layers issue the same records and compute the same; with
// pp = 80 the time model runs three stages instead of 80).
std::vector<int> distinct_stages(const PlanLayout& layout) {
  const RunConfig& c = layout.config();
  const int P = layout.dims().pp, v = P > 1 ? c.parallel.pp_virtual : 1;
  if (P <= 2) return P == 1 ? std::vector<int>{0} : std::vector<int>{0, 1};
  const auto ranges = stage_layers(c.model.n_layer, P * v, c.parallel.pp_layers);
  std::set<std::vector<int>> seen;
  std::vector<int> stages{0};
  for (int stage = 1; stage < P - 1; ++stage) {
    std::vector<int> layers;
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto [begin, end] = ranges[size_t(chunk * P + stage)];
      layers.push_back(end - begin);
    }
    if (seen.insert(layers).second) stages.push_back(stage);
  }
  stages.push_back(P - 1);
  return stages;
}

}  // namespace

StepTime slowest_step(const PlanLayout& layout, const Cluster& cluster) {
  StepTime worst;
  worst.step_s = -1;
  for (int stage : distinct_stages(layout)) {
    const int rank = ProcessGrid::rank_of(layout.dims(), GridCoords{0, 0, 0, 0, stage});
    StepTime time = step_time(layout, comm_schedule(layout, rank, false), cluster, rank);
    if (time.step_s > worst.step_s) worst = std::move(time);
  }
  return worst;
}

nlohmann::json plan_layout(const PlanLayout& layout, const Cluster& cluster, bool schedule) {
  const RunConfig& c = layout.config();
  nlohmann::json worst;
  double worst_step = -1;
  std::vector<CommRecord> rank0;
  for (int stage : distinct_stages(layout)) {
    const int rank = ProcessGrid::rank_of(layout.dims(), GridCoords{0, 0, 0, 0, stage});
    const std::vector<CommRecord> records = comm_schedule(layout, rank, false);
    if (rank == 0) rank0 = records;
    const StepTime time = step_time(layout, records, cluster, rank);
    if (time.step_s <= worst_step) continue;
    worst_step = time.step_s;
    const auto table = &planned_stage(c.model, StageRange{0, c.model.n_layer}, TpPiece{c.parallel.tp, 0});
    const PlanMemory memory = plan_memory(layout, rank);
    nlohmann::json mem = memory.to_json();
    const uint64_t limit = memory_limit(cluster);
    mem["limit"] = limit;
    mem["fits"] = limit == 0 || memory.total() <= limit;
    // The engine observed peak RSS 3-30% above its accounted total (planner.md §4.3); never used for fits.
    mem["rss_band"] = {uint64_t(double(memory.total()) * 1.03), uint64_t(double(memory.total()) * 1.30)};
    worst = {{"rank", rank},
             {"fits", mem["fits"]},
             {"memory", mem},
             {"bytes", bytes_json(records, table->table().total())},
             {"comm", comm_totals_json(comm_totals(records))},
             {"time", time.to_json()},
             {"inputs", {{"measured", time.measured}, {"declared", time.declared}}}};
  }
  const std::string gap = byte_model_gap(layout);
  nlohmann::json out = {{"layout", layout_json(layout)},
                        {"cluster", cluster.name},
                        {"bytes_exact", gap.empty()},
                        {"bytes_note", gap.empty() ? "the engine's collectives, record for record"
                                                   : gap + "; planned as whole-sequence Ulysses"}};
  out.update(worst);
  if (schedule) {
    nlohmann::json s = nlohmann::json::array();
    for (const CommRecord& r : rank0) s.push_back(comm_record_json(r));
    out["schedule"] = s;
  }
  return out;
}

std::string plan_table(const nlohmann::json& p) {
  const nlohmann::json& l = p["layout"];
  const nlohmann::json& t = p["time"];
  const nlohmann::json& b = p["bytes"];
  std::string s = fmt::format(
      "layout: world {} ({} node(s) of {}) = dp {} x tp {} x pp {} x ulysses {} x ring {}; ZeRO {}; "
      "micro_batch {} "
      "x {} micro-steps; seq {}; {}\n",
      l["world"].get<int>(), l["nodes"].get<int>(), l["ranks_per_node"].get<int>(), l["dp"].get<int>(),
      l["tp"].get<int>(), l["pp"].get<int>(), l["sp_ulysses"].get<int>(), l["sp_ring"].get<int>(),
      l["zero_stage"].get<int>(), l["micro_batch"].get<int>(), l["micro_steps"].get<int>(),
      l["seq_len"].get<int>(), l["precision"].get<std::string>());
  s += fmt::format(
      "bytes per step per rank (bus): intra {:.4g} MB, inter {:.4g} MB; crossing: {:.4g} MB per device "
      "link, {:.4g} MB per node NIC\n",
      b["per_step"]["intra"].get<double>() / 1e6, b["per_step"]["inter"].get<double>() / 1e6,
      b["crossing"]["intra_per_device"].get<double>() / 1e6,
      b["crossing"]["inter_per_node"].get<double>() / 1e6);
  s += fmt::format("time per step: {:.4g} s  = compute fwd {:.4g} + bwd {:.4g} + recompute {:.4g}",
                   t["step_s"].get<double>(), t["compute_fwd_s"].get<double>(),
                   t["compute_bwd_s"].get<double>(), t["recompute_s"].get<double>());
  for (const auto& [cls, v] : t["comm_exposed_s"].items())
    s += fmt::format(" + {} {:.4g}", cls, v.get<double>());
  s += fmt::format(" + slowdown {:.4g} + quantize {:.4g} + bubble {:.4g} + optimizer {:.4g}\n",
                   t["compute_slowdown_s"].get<double>(), t["quantize_s"].get<double>(),
                   t["bubble_s"].get<double>(), t["optimizer_s"].get<double>());
  s += fmt::format("tokens/s {:.4g}, MFU {:.3f}\n", t["tokens_per_s"].get<double>(), t["mfu"].get<double>());
  return s;
}

}  // namespace odyssey
