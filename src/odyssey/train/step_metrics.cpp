#include "odyssey/train/step_metrics.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

#include "odyssey/train/footprint.h"

namespace odyssey {

MemoryReport live_memory(Layout& layout) {
  // The footprint of this rank under the policy its stages run (train/footprint.h): what the engines,
  // the runner and the ops allocate, sized from the config (tests/train/mpitest_footprint.cpp checks it
  // against their allocations); computed once per policy by the layout.
  const RankFootprint& f = layout.footprint(layout.policy);
  MemoryReport memory;
  memory.params = f.state.params, memory.grads = f.state.grads, memory.optimizer = f.state.optimizer;
  memory.activations = f.activations;
  memory.comm_buffers = f.comm_buffers;
  return memory;
}

CommTraffic engines_traffic(const Layout& layout) {
  CommTraffic traffic;
  for (const auto& engine : layout.engines) {
    const CommTraffic& t = engine->traffic();
    traffic.weights_intra += t.weights_intra, traffic.weights_inter += t.weights_inter;
    traffic.grads_intra += t.grads_intra, traffic.grads_inter += t.grads_inter;
  }
  return traffic;
}

std::pair<uint64_t, uint64_t> peak_rss(Communicator& world) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const uint64_t mine = uint64_t(usage.ru_maxrss) * 1024;
  std::vector<uint64_t> all(size_t(world.size()));
  world.all_gather(&mine, all.data(), sizeof(uint64_t), DType::u8);
  return {mine, *std::max_element(all.begin(), all.end())};
}

nlohmann::json pipeline_metrics(Layout& layout, const StepResult& step, double step_ms) {
  Communicator& pp = layout.grid.pp();
  const PipelineRunner& runner = *layout.runner;
  // (and the compute time by action kind: F, B, I, W)
  const std::array<double, 4>& kind_s = runner.compute_seconds_by_kind();
  constexpr int kFigures = 9;
  double mine[kFigures] = {step.pp_wait_ms,
                           step.pp_compute_ms,
                           step.pp_run_ms,
                           double(runner.peak_in_flight()),
                           double(runner.peak_activation_bytes()),
                           1e3 * kind_s[0],
                           1e3 * kind_s[1],
                           1e3 * kind_s[2],
                           1e3 * kind_s[3]};
  std::vector<double> all(size_t(kFigures * pp.size()));
  pp.all_gather(mine, all.data(), kFigures * sizeof(double), DType::u8);
  nlohmann::json j = {{"schedule", enum_name(kPipelineScheduleNames, layout.config.parallel.pp_schedule)},
                      {"P", layout.shape.P},
                      {"v", layout.shape.v},
                      {"m", layout.shape.m}};
  double compute = 0, longest = 0;
  for (int r = 0; r < pp.size(); ++r) {
    const double* x = &all[size_t(kFigures * r)];
    j["wait_ms"].push_back(x[0]);
    j["compute_ms"].push_back(x[1]);
    j["run_ms"].push_back(x[2]);
    j["peak_in_flight"].push_back(int(x[3]));
    j["activation_bytes"].push_back(uint64_t(x[4]));
    j["action_ms"].push_back({{"F", x[5]}, {"B", x[6]}, {"I", x[7]}, {"W", x[8]}});
    compute += x[1];
    longest = std::max(longest, x[2]);
  }
  j["bubble_fraction"] = longest > 0 ? 1.0 - compute / (pp.size() * longest) : 0.0;
  j["bubble_unit_cost"] = runner.unit_cost_bubble();  // the action table's own, load-independent
  j["run_fraction_of_step"] = step_ms > 0 ? longest / step_ms : 0.0;
  return j;
}

nlohmann::json step_record(const StepFigures& f) {
  nlohmann::json record = {{"step", f.step},
                           {"loss", f.result.loss},
                           {"lr", f.lr},
                           {"grad_norm", f.result.grad_norm},
                           {"tokens", f.step * f.step_tokens},
                           {"step_ms", f.ms},
                           {"tokens_per_s", f.tokens_per_s()},
                           {"mfu", f.mfu},
                           {"peak_gflops", f.peak_gflops},
                           {"comm", f.comm},
                           {"comm_bytes_per_param", f.traffic.per_param_json(f.params)},
                           {"memory", f.memory.to_json()},
                           {"peak_rss_bytes", f.peak_rss},
                           {"peak_rss_bytes_max", f.peak_rss_max}};
  record["comm"]["inter_node_sent_bytes_all_ranks"] = f.inter_node_sent;
  if (f.offload)
    record["offload"] = {{"bytes_written", f.offload->bytes_written},
                         {"bytes_read", f.offload->bytes_read},
                         {"bytes_read_late", f.offload->bytes_read_late},
                         {"stall_s", f.offload->stall_seconds}};
  if (f.overlap) {
    // Domino (spec §9): the share of its tp reductions' time the compute did not wait for (rank 0's).
    record["tp_hidden_fraction"] = f.overlap->hidden_fraction();
    record["tp_overlap"] = {{"comm_ms", f.overlap->comm_seconds * 1e3},
                            {"wait_ms", f.overlap->wait_seconds * 1e3}};
  }
  if (f.dp_comm) {
    // ZeRO's gathers and reductions: the time the compute waited for them (rank 0's); with the
    // communication thread also their whole time and the share of it hidden behind compute.
    record["dp_comm"] = {{"exposed_ms", f.dp_comm->exposed_seconds * 1e3}, {"thread", f.dp_comm->threaded}};
    if (f.dp_comm->threaded) {
      record["dp_comm"]["comm_ms"] = f.dp_comm->comm_seconds * 1e3;
      record["dp_comm"]["hidden_fraction"] = f.dp_comm->hidden_fraction();
    }
  }
  if (!f.pipeline.is_null()) {
    record["pipeline"] = f.pipeline;
    record["pp_wait_ms"] = f.pipeline["wait_ms"];  // the spec's name (§9), per pp rank
  }
  if (f.val_loss) record["val_loss"] = *f.val_loss;
  if (!f.precision.is_null()) record["precision"] = f.precision;
  return record;
}

std::string step_line(const StepFigures& f) {
  return fmt::format(
      "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {:.0f} tok/s | mfu {:.1f}% | "
      "comm "
      "{:.2f} MB{}{}{}",
      f.step, f.steps, f.result.loss, f.val_loss ? fmt::format(" | val {:.4f}", *f.val_loss) : "", f.lr,
      f.result.grad_norm, f.ms, f.tokens_per_s(), 100 * f.mfu, double(f.comm["total_bytes"]) / 1e6,
      f.dp_comm ? fmt::format(" | dp exposed {:.0f} ms{}", f.dp_comm->exposed_seconds * 1e3,
                              f.dp_comm->threaded
                                  ? fmt::format(" (hidden {:.0f}%)", 100 * f.dp_comm->hidden_fraction())
                                  : "")
                : "",
      f.overlap ? fmt::format(" | tp hidden {:.0f}%", 100 * f.overlap->hidden_fraction()) : "",
      f.peak_raised ? fmt::format(" | peak raised to {:.1f} GFLOP/s", f.peak_gflops) : "");
}

std::string memory_line(const MemoryReport& memory) {
  return fmt::format(
      "memory per rank: params {:.2f} MB, grads {:.2f} MB, optimizer {:.2f} MB, activations {:.2f} MB, "
      "comm buffers {:.2f} MB",
      memory.params / 1e6, memory.grads / 1e6, memory.optimizer / 1e6, memory.activations / 1e6,
      memory.comm_buffers / 1e6);
}

}  // namespace odyssey
