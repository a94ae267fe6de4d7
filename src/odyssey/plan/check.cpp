#include "odyssey/plan/check.h"

#include <unistd.h>

#include <filesystem>

#include "odyssey/core/error.h"
#include "odyssey/plan/byte_model.h"
#include "odyssey/plan/layout.h"
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

}  // namespace

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
  TrainResult result = run_training(run, world);
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);

  nlohmann::json measured = result.last_record.value("comm", nlohmann::json::object());
  nlohmann::json predicted = comm_totals_json(comm_totals(records));
  nlohmann::json report = {{"rank", world.rank()}, {"predicted", predicted}, {"measured", measured}};
  report["mismatches"] = compare_comm(predicted, measured);
  return report;
}

}  // namespace odyssey
