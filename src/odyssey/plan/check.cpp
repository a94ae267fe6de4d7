#include "odyssey/plan/check.h"

#include <unistd.h>

#include <filesystem>
#include <map>

#include "odyssey/core/error.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/layout.h"
#include "odyssey/plan/memory_model.h"
#include "odyssey/train/trainer.h"

namespace odyssey {

namespace fs = std::filesystem;

namespace {

uint64_t field(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? j.at(key).get<uint64_t>() : 0;
}

// Compares every numeric field of two maps of {name: {field: n}} (a missing entry counts as zeros).
void compare_map(const nlohmann::json& p, const nlohmann::json& m, const std::string& label,
                 const std::vector<const char*>& fields, std::vector<std::string>& out) {
  std::vector<std::string> names;
  for (const auto& [k, v] : p.items()) names.push_back(k);
  for (const auto& [k, v] : m.items())
    if (!p.contains(k)) names.push_back(k);
  for (const std::string& name : names) {
    const nlohmann::json a = p.contains(name) ? p.at(name) : nlohmann::json::object();
    const nlohmann::json b = m.contains(name) ? m.at(name) : nlohmann::json::object();
    for (const char* f : fields) {
      const uint64_t x = field(a, f), y = field(b, f);
      if (x != y) out.push_back(fmt::format("{} {} {}: predicted {}, measured {}", label, name, f, x, y));
    }
  }
}

// A call as both lists name it: group, kind, level, count, dtype, bus bytes.
std::string call_key(const std::string& group, const std::string& kind, const std::string& level,
                     uint64_t count, const std::string& dtype, uint64_t bus) {
  return fmt::format("{} on {} ({}): {} x {}, {} bus bytes", kind, group, level, count, dtype, bus);
}

}  // namespace

std::vector<std::string> compare_trace(const std::vector<CommRecord>& predicted,
                                       const nlohmann::json& trace) {
  std::map<std::string, int64_t> measured;
  for (const auto& r : trace)
    ++measured[call_key(r.at("group").get<std::string>(), r.at("kind").get<std::string>(),
                        r.at("level").get<std::string>(), r.at("count").get<uint64_t>(),
                        r.at("dtype").get<std::string>(), r.at("bus_bytes").get<uint64_t>())];
  std::vector<std::string> out;
  size_t index = 0;
  for (const CommRecord& r : predicted)
    for (uint64_t k = 0; k < r.repeat; ++k, ++index) {
      const std::string key = call_key(r.group, comm_kind_name(r.kind), r.intra ? "intra" : "inter", r.count,
                                       r.dtype, r.bus_bytes);
      auto it = measured.find(key);
      if (it != measured.end() && it->second > 0) {
        --it->second;
        continue;
      }
      if (out.empty())
        out.push_back(
            fmt::format("trace: planned call {} ({} micro-step {}, {}) is not in the engine's trace: {}",
                        index, r.phase, r.micro, r.what, key));
    }
  for (const auto& [key, n] : measured)
    if (n > 0) {
      out.push_back(fmt::format("trace: the engine made {} call(s) the plan lacks: {}", n, key));
      break;
    }
  return out;
}

std::vector<std::string> compare_comm(const nlohmann::json& predicted, const nlohmann::json& measured) {
  std::vector<std::string> out;
  for (const char* f : {"total_bytes", "intra_node_bytes", "inter_node_bytes"})
    if (field(predicted, f) != field(measured, f))
      out.push_back(fmt::format("{}: predicted {}, measured {}", f, field(predicted, f), field(measured, f)));
  compare_map(predicted.value("by_kind", nlohmann::json::object()),
              measured.value("by_kind", nlohmann::json::object()), "kind",
              {"calls", "bytes", "intra_node_bytes", "inter_node_bytes"}, out);
  compare_map(predicted.value("by_group", nlohmann::json::object()),
              measured.value("by_group", nlohmann::json::object()), "group", {"calls", "bytes"}, out);
  return out;
}

nlohmann::json check_layout(const RunConfig& config, Communicator& world) {
  // The plan first: a layout the planner cannot cover is refused before anything runs.
  const PlanLayout layout(config, world.size(), config.parallel.ranks_per_node);
  const std::vector<CommRecord> records = comm_schedule(layout, world.rank());

  // A scratch run directory every rank agrees on.
  int32_t id = world.rank() == 0 ? int32_t(::getpid()) : 0;
  world.broadcast(&id, 1, DType::i32, 0);
  const std::string dir = (fs::temp_directory_path() / ("odyssey_plan_check_" + std::to_string(id))).string();
  RunConfig run = config;
  run.train.steps = 2;  // the second step is compared (the first warms up)
  run.train.exit_after = 0;
  run.train.eval_every = 0;
  run.data.val.clear();
  run.checkpoint.dir = dir;
  run.checkpoint.every = 0;
  run.checkpoint.resume = false;
  run.checkpoint.overwrite = true;
  run.log.metrics = dir + "/metrics.jsonl";
  if (run.train.gemm_gflops == 0) run.train.gemm_gflops = 1;  // MFU's rate is not checked; skip measuring it
  // Every call of the compared step, as the metrics' "comm" reports it with the trace on.
  run.log.comm_trace = true;
  TrainResult result = run_training(run, world);
  world.stats().set_trace(false);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);

  nlohmann::json measured = result.last_record.value("comm", nlohmann::json::object());
  nlohmann::json predicted = comm_totals_json(comm_totals(records));
  nlohmann::json report = {{"rank", world.rank()}, {"predicted", predicted}, {"measured", measured}};
  std::vector<std::string> mismatches = compare_comm(predicted, measured);
  for (std::string& m : compare_trace(records, measured.value("trace", nlohmann::json::array())))
    mismatches.push_back(std::move(m));
  report["calls"] = measured.value("trace", nlohmann::json::array()).size();
  measured.erase("trace");  // the report keeps the totals
  // Memory (planner.md 9.2): the model state exactly, from the engine's footprint function; activations
  // and communication buffers reported beside the engine's until they come from it too.
  const nlohmann::json engine_memory = result.last_record.value("memory", nlohmann::json::object());
  const PlanMemory planned = plan_memory(layout, world.rank());
  const nlohmann::json plan_mem = planned.to_json();
  for (const char* f : {"params", "grads", "optimizer"})
    if (field(plan_mem, f) != field(engine_memory, f))
      mismatches.push_back(fmt::format("memory {}: predicted {}, measured {}", f, field(plan_mem, f),
                                       field(engine_memory, f)));
  report["memory"] = {{"predicted", plan_mem}, {"measured", engine_memory}};
  report["mismatches"] = mismatches;
  return report;
}

}  // namespace odyssey
