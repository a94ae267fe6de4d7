// The run configuration: TOML sections [model] [data] [train] [parallel] [comm] [checkpoint] [memory] [log],
// each key overridable with --set section.key=value. Unknown keys, wrong types and impossible values
// are errors that name the key. Values are parsed once into typed fields (choices into enums); one key
// table (config.cpp) parses them and writes the whole run record (run_config_to_json).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/data/tokenizer.h"
#include "odyssey/model/config.h"
#include "odyssey/model/stage.h"
#include "odyssey/optim/schedule.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/pipeline_schedule.h"
#include "odyssey/parallel/sequence_shard.h"

namespace odyssey {

// train.precision: fp32 today; bf16 (mixed-precision.md) is refused until it lands.
enum class Precision { fp32, bf16 };
inline constexpr EnumNames<Precision, 2> kPrecisionNames = {
    {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}}};

// parallel.tp_overlap: Domino (tensor-pipeline-parallelism.md §2) hides the tensor-parallel reductions
// behind the other half of the micro-batch; parallel.domino_split: which half (rows: the first and last
// B/2 rows; tokens: with one row, the first and last half of its tokens).
enum class TpOverlap { none, domino };
inline constexpr EnumNames<TpOverlap, 2> kTpOverlapNames = {
    {{"none", TpOverlap::none}, {"domino", TpOverlap::domino}}};
enum class DominoSplit { rows, tokens };
inline constexpr EnumNames<DominoSplit, 2> kDominoSplitNames = {
    {{"rows", DominoSplit::rows}, {"tokens", DominoSplit::tokens}}};

struct DataConfig {
  std::string train;  // token shard file or glob
  std::string val;    // optional
  bool shuffle = false;
  TokenizerKind tokenizer = TokenizerKind::bytes;  // how to decode samples (data/tokenizer.h)
  std::string vocab_dir;                           // encoder.json + vocab.bpe for gpt2
};

struct TrainConfig {
  int64_t steps = 100;
  int global_batch = 8;  // rows per optimizer step, independent of the layout
  int micro_batch = 8;   // rows per data-parallel rank per micro-step
  int seq_len = 0;       // tokens per row; 0 = model.seq_len
  float lr = 6e-4f, min_lr = 6e-5f;
  int64_t warmup_steps = 0;
  ScheduleKind schedule = ScheduleKind::cosine;
  float weight_decay = 0.1f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, grad_clip = 1.0f;
  uint64_t seed = 1337;
  Precision precision = Precision::fp32;
  int64_t eval_every = 0;     // validation loss every N steps (0: only at the end)
  int eval_rows = 32;         // rows of the val data per evaluation (0: all)
  int threads = 0;            // OpenMP threads per rank (0: the host's cores / ranks on the host)
  int64_t exit_after = 0;     // stop after this many steps of this invocation, with a checkpoint (0: never)
  double host_memory_gb = 0;  // memory budget per host for the start-up check (0: MemAvailable)
  double gemm_gflops = 0;     // MFU's denominator stated, fp32 GFLOP/s per rank (0: the hardware peak
                              // of the rank's cores, train/mfu.h)
};

struct ParallelConfig {
  int dp = 0;  // 0: derived from the world size
  int sp_ulysses = 1, sp_ring = 1, tp = 1, pp = 1;
  // Megatron sequence parallelism under tp > 1 (tensor-pipeline-parallelism.md §1.7): norms and
  // residuals on token slices, all-gather before the column-parallel GEMMs, reduce-scatter after the
  // row-parallel ones.
  bool tp_sp = true;
  TpOverlap tp_overlap = TpOverlap::none;
  DominoSplit domino_split = DominoSplit::rows;
  RingLayout sp_ring_layout = RingLayout::zigzag;  // token order across ring ranks
  int zero_stage = 0;
  int ranks_per_node = 0;  // 0: as MPI reports
  double bucket_mb = 25;   // gradient bucket size in MB (10^6 bytes); 0: one unit per bucket
  // Pipeline parallelism (tensor-pipeline-parallelism.md §3): the schedule, stages per pp rank, and an
  // optional explicit split (layers per stage, pp x pp_virtual entries; empty: split_layers).
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;
  int pp_virtual = 1;
  std::vector<int> pp_layers;
};

// comm.overlap_thread: whether ZeRO's gathers and gradient reductions run on a communication thread
// (parallel/zero.h); auto: when the data-parallel group spans nodes and MPI has THREAD_MULTIPLE.
enum class OverlapThread { automatic, on, off };
inline constexpr EnumNames<OverlapThread, 3> kOverlapThreadNames = {
    {{"auto", OverlapThread::automatic}, {"on", OverlapThread::on}, {"off", OverlapThread::off}}};

struct CommConfig {
  WeightComm weights = WeightComm::none;
  GradComm grads = GradComm::none;
  bool hpz = false;
  int grad_pipeline = 1;  // slices of the two-level gradient reduce-scatter (intra/inter overlapped)
  OverlapThread overlap_thread = OverlapThread::automatic;
};

struct CheckpointConfig {
  std::string dir = "runs/default";  // the run directory: checkpoints step_XXXXXXXX/ and metrics
  int64_t every = 0;                 // 0: only at the end
  int keep = 0;                      // newest checkpoints kept (0: all)
  bool resume = false;
  // A fresh run (resume = false) refuses a run directory that holds another run's checkpoints or
  // metrics, unless overwrite = true: then they are deleted first.
  bool overwrite = false;
};

// Activation memory for long sequences (long-context-memory.md §5).
struct MemoryConfig {
  // What a layer keeps for its backward: none (everything), cheap, keep_attention or full (its input;
  // the layer is recomputed in its backward), all bitwise the same numbers. model/stage.h.
  CheckpointPolicy checkpoint = CheckpointPolicy::automatic;  // the fastest that fits
  // Rows of LM-head logits held at once: the head and its loss run fused over chunks of this many
  // tokens (4·V bytes each), never holding [tokens, V]. 0: the whole micro-batch in one chunk.
  int head_chunk_tokens = 1024;
  int chunk_tokens = 4096;  // rows per token-local chunk of a layer (0: the whole micro-batch)
  // Where keep_attention and full keep the layer inputs: ram, or disk (a scratch file per rank in
  // offload_dir, written in the forward, read back one layer ahead in the backward; two layer inputs
  // resident). The scratch files live in a directory of their own per rank and job, never in the
  // checkpoint directory, and are gone when the process ends.
  MemoryTier tier = MemoryTier::ram;
  std::string offload_dir;
  double disk_budget_gb = 0;  // disk space the scratch files of this host's ranks may take (0: free - 10%)
};

struct LogConfig {
  std::string metrics;  // default <checkpoint.dir>/metrics.jsonl
  int64_t every = 1;
  bool comm_trace = false;  // every collective call in the step's metrics "comm.trace" (CommStats)
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CommConfig comm;
  CheckpointConfig checkpoint;
  MemoryConfig memory;
  LogConfig log;

  int seq_len() const { return train.seq_len > 0 ? train.seq_len : model.seq_len; }
  std::string metrics_path() const {
    return log.metrics.empty() ? checkpoint.dir + "/metrics.jsonl" : log.metrics;
  }
  // Checks values and their combinations for a run on world_size ranks; fails naming the keys.
  void validate(int world_size) const;
  // The layers' row chunks (memory.chunk_tokens as the stages take it): under Domino the two halves of
  // a micro-batch's residual rows on a rank, else memory.chunk_tokens.
  int layer_chunk_rows() const;
};

// Every key with its value, as {"section": {"key": value}} (choices by name): the run record a
// checkpoint manifest keeps.
nlohmann::json run_config_to_json(const RunConfig& config);

// One key of the configuration reference (`odyssey config-reference`, docs/configuration.md): its
// name, type, default (RunConfig{}'s value as text) and meaning, from the key table; sorted by name.
struct ConfigKeyInfo {
  std::string name, type, default_value, meaning;
};
std::vector<ConfigKeyInfo> config_key_reference();

// Parses the TOML file, then applies the overrides ("section.key=value").
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The same from TOML text (source names the origin in error messages).
RunConfig parse_run_config(const std::string& toml_text, const std::string& source,
                           const std::vector<std::string>& overrides);

}  // namespace odyssey
