// The per-step metrics, assembled in one place: the figures a step yields (its result, time, traffic,
// memory, the pipeline's and Domino's figures, the disk tier's I/O) become the metrics record
// (one JSON line of log.metrics) and the console line.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "odyssey/comm/comm_thread.h"
#include "odyssey/model/stage.h"
#include "odyssey/parallel/zero.h"
#include "odyssey/train/layout_builder.h"
#include "odyssey/train/train_step.h"

namespace odyssey {

struct StepFigures {
  int64_t step = 0;   // 1-based: the optimizer steps done
  int64_t steps = 0;  // train.steps
  float lr = 0;
  StepResult result;
  double ms = 0;
  int64_t step_tokens = 0;  // global_batch x seq_len
  double mfu = 0;
  double peak_gflops = 0;    // MFU's denominator (train/mfu.h)
  bool peak_raised = false;  // a step ran above the computed or stated peak, which was raised to it
  nlohmann::json comm;       // the step's traffic (CommStats::to_json)
  CommTraffic traffic;       // the engines' traffic by purpose
  int64_t params = 0;        // parameters of this rank's stages
  MemoryReport memory;       // per rank
  uint64_t peak_rss = 0, peak_rss_max = 0;
  uint64_t inter_node_sent = 0;         // payload bytes all ranks sent to other hosts (comm/wire_bytes.h)
  nlohmann::json pipeline;              // pipeline_metrics (null with one pp rank)
  std::optional<OverlapTimes> overlap;  // Domino's tp reductions (parallel.tp_overlap = domino)
  std::optional<ExposedComm> dp_comm;   // the ZeRO engines' collectives (dp > 1), rank 0's
  std::optional<OffloadStats> offload;  // the step's disk-tier traffic (memory.tier = disk)
  std::optional<double> val_loss;       // when validation ran this step
  nlohmann::json precision;             // train.precision = bf16: the state's bytes by dtype (null: fp32)

  double tokens_per_s() const { return step_tokens / (ms / 1e3); }
};

// What this rank holds (its footprint under the policy its stages run, train/footprint.h: the engines'
// state and comm buffers, the activations of its pipeline's peak, the attention op's and the GEMMs'
// scratch) and what its engines sent, summed over its stages.
MemoryReport live_memory(Layout& layout);
CommTraffic engines_traffic(const Layout& layout);

// Peak resident set size of this process and the largest over all ranks (collective).
std::pair<uint64_t, uint64_t> peak_rss(Communicator& world);

// The pipeline's figures of a step, per pp rank (collective over pp): the time blocked in receives (the
// measured bubble), in compute, the schedule's run, the micro-batch stages held at once and their
// activation bytes; and the bubble fraction 1 - (compute summed over the ranks) / (P x the longest run),
// the spec's idle fraction (§3.8) measured.
nlohmann::json pipeline_metrics(Layout& layout, const StepResult& step, double step_ms);

// The metrics record of a step (DESIGN's contract: step, loss, lr, grad_norm, tokens, step_ms,
// tokens_per_s, mfu, comm, and the rest).
nlohmann::json step_record(const StepFigures& f);
// The console line of a step.
std::string step_line(const StepFigures& f);
// The memory line logged after the first step.
std::string memory_line(const MemoryReport& memory);

}  // namespace odyssey
