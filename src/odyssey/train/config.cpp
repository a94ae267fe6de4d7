#include "odyssey/train/config.h"

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "odyssey/core/checked_int.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"
#include "odyssey/data/tokenizer.h"
#include "odyssey/model/architecture.h"
#include "odyssey/model/params.h"
#include "odyssey/parallel/comm_options.h"
#include "odyssey/parallel/sequence_shard.h"
#include "odyssey/parallel/ulysses.h"

namespace odyssey {
namespace {

// One settable key: how to set it from a TOML node (file) and from text (--set), its value as JSON
// (the run record), and its documentation: type and meaning (the default is RunConfig{}'s value), which
// `odyssey config-reference` renders into docs/configuration.md.
struct Key {
  std::function<void(RunConfig&, const toml::node&, const std::string&)> from_toml;
  std::function<void(RunConfig&, const std::string&, const std::string&)> from_text;
  std::function<nlohmann::json(const RunConfig&)> to_json;
  std::string type, meaning;
};

Key documented(Key k, const char* meaning) {
  k.meaning = meaning;
  return k;
}

template <typename T>
T parse_number(const std::string& text, const std::string& key) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  ODY_CHECK(ec == std::errc() && ptr == end, "{}: '{}' is not a valid {}", key, text,
            std::is_floating_point_v<T> ? "number" : "integer");
  return value;
}

std::string unquote(const std::string& text) {
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') return text.substr(1, text.size() - 2);
  return text;
}

// A key for a bool, number or string field reached by `field(config)` (const or not).
template <typename T, typename Get>
Key make_key(Get field) {
  Key k;
  k.from_toml = [field](RunConfig& c, const toml::node& node, const std::string& key) {
    if constexpr (std::is_same_v<T, bool>) {
      auto v = node.value<bool>();
      ODY_CHECK(v && node.is_boolean(), "{}: expected true or false", key);
      field(c) = *v;
    } else if constexpr (std::is_same_v<T, std::string>) {
      ODY_CHECK(node.is_string(), "{}: expected a string", key);
      field(c) = *node.value<std::string>();
    } else if constexpr (std::is_floating_point_v<T>) {
      ODY_CHECK(node.is_number(), "{}: expected a number", key);
      field(c) = T(*node.value<double>());
    } else {
      ODY_CHECK(node.is_integer(), "{}: expected an integer", key);
      int64_t v = *node.value<int64_t>();
      ODY_CHECK(v >= int64_t(std::numeric_limits<T>::min()) &&
                    uint64_t(v) <= uint64_t(std::numeric_limits<T>::max()),
                "{}: {} is out of range", key, v);
      field(c) = T(v);
    }
  };
  k.from_text = [field](RunConfig& c, const std::string& text, const std::string& key) {
    if constexpr (std::is_same_v<T, bool>) {
      ODY_CHECK(text == "true" || text == "false", "{}: expected true or false, got '{}'", key, text);
      field(c) = text == "true";
    } else if constexpr (std::is_same_v<T, std::string>) {
      field(c) = unquote(text);
    } else {
      field(c) = parse_number<T>(text, key);
    }
  };
  k.to_json = [field](const RunConfig& c) { return nlohmann::json(field(c)); };
  k.type = std::is_same_v<T, bool>          ? "boolean"
           : std::is_same_v<T, std::string> ? "string"
           : std::is_floating_point_v<T>    ? "number"
           : std::is_unsigned_v<T>          ? "integer >= 0"
                                            : "integer";
  return k;
}

// A key whose value is one of an enum's names.
template <typename E, size_t N, typename Get>
Key make_enum_key(Get field, const EnumNames<E, N>& names) {
  Key k;
  k.from_toml = [field, &names](RunConfig& c, const toml::node& node, const std::string& key) {
    ODY_CHECK(node.is_string(), "{}: expected a string ({})", key, enum_choices(names));
    field(c) = parse_enum(names, *node.value<std::string>(), key);
  };
  k.from_text = [field, &names](RunConfig& c, const std::string& text, const std::string& key) {
    field(c) = parse_enum(names, unquote(text), key);
  };
  k.to_json = [field, &names](const RunConfig& c) { return nlohmann::json(enum_name(names, field(c))); };
  k.type = "one of " + enum_choices(names);
  return k;
}

// A key whose value is a list of integers: a TOML array, or comma-separated text ("3,2,4" or "[3,2,4]").
template <typename Get>
Key make_int_list_key(Get field) {
  Key k;
  k.from_toml = [field](RunConfig& c, const toml::node& node, const std::string& key) {
    ODY_CHECK(node.is_array(), "{}: expected a list of integers like [3, 2, 4]", key);
    std::vector<int> values;
    for (const toml::node& v : *node.as_array()) {
      ODY_CHECK(v.is_integer(), "{}: expected a list of integers like [3, 2, 4]", key);
      const int64_t x = *v.value<int64_t>();
      ODY_CHECK(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(),
                "{}: {} is out of range", key, x);
      values.push_back(int(x));
    }
    field(c) = values;
  };
  k.from_text = [field](RunConfig& c, const std::string& text, const std::string& key) {
    std::string t = text;
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
    std::vector<int> values;
    for (size_t at = 0; at < t.size();) {
      size_t comma = t.find(',', at);
      if (comma == std::string::npos) comma = t.size();
      std::string item = t.substr(at, comma - at);
      item.erase(0, item.find_first_not_of(' '));
      item.erase(item.find_last_not_of(' ') + 1);
      values.push_back(parse_number<int>(item, key));
      at = comma + 1;
    }
    field(c) = values;
  };
  k.to_json = [field](const RunConfig& c) { return nlohmann::json(field(c)); };
  k.type = "list of integers";
  return k;
}

#define ODY_KEY(name, type, member, meaning)                                             \
  {                                                                                      \
    name, documented(make_key<type>([](auto& c) -> auto& { return c.member; }), meaning) \
  }
#define ODY_ENUM_KEY(name, member, names, meaning)                          \
  {                                                                         \
    name, documented(make_enum_key(                                         \
                         [](auto& c) -> auto& { return c.member; }, names), \
                     meaning)                                               \
  }

const std::map<std::string, Key>& keys() {
  static const std::map<std::string, Key> table = {
      ODY_ENUM_KEY(
          "model.arch", model.arch, kArchNames,
          "architecture: `gpt2` (Hugging Face GPT2LMHeadModel exactly), `llama` (LlamaForCausalLM) or "
          "`qwen2` "
          "(Qwen2ForCausalLM: Llama's block with q, k, v biases)"),
      ODY_KEY("model.n_layer", int, model.n_layer, "transformer layers"),
      ODY_KEY("model.n_head", int, model.n_head, "attention (query) heads; `d_model` must divide by it"),
      ODY_KEY("model.d_model", int, model.d_model, "width of the residual stream"),
      ODY_KEY("model.seq_len", int, model.seq_len,
              "the model's context: rows of GPT-2's position table, Llama's longest position"),
      ODY_KEY("model.vocab_size", int, model.vocab_size,
              "vocabulary (256 for `bytes`, 50257 for `gpt2`); every token shard is checked against it"),
      // Llama (tensor-pipeline-parallelism.md §5.1); GPT-2 refuses the shape keys that differ from its own.
      ODY_KEY("model.n_kv_head", int, model.n_kv_head,
              "Llama key/value heads for grouped-query attention (0: `n_head`); GPT-2 refuses other values"),
      ODY_KEY("model.d_ff", int, model.d_ff,
              "Llama MLP width (0: GPT-2's 4 x `d_model`); GPT-2 refuses other values"),
      ODY_KEY("model.head_dim", int, model.head_size,
              "head size (0: `d_model / n_head`); GPT-2 refuses other values"),
      ODY_KEY("model.rms_norm_eps", double, model.rms_norm_eps,
              "Llama RMSNorm epsilon (GPT-2's LayerNorm uses 1e-5)"),
      ODY_KEY("model.rope_theta", double, model.rope_theta, "Llama RoPE base"),
      ODY_ENUM_KEY("model.rope_scaling.rope_type", model.rope_scaling.rope_type, kRopeTypeNames,
                   "Llama-3 frequency scaling of RoPE: `llama3`, or empty for none"),
      ODY_KEY("model.rope_scaling.factor", double, model.rope_scaling.factor, "Llama-3 RoPE scaling: factor"),
      ODY_KEY("model.rope_scaling.low_freq_factor", double, model.rope_scaling.low_freq_factor,
              "Llama-3 RoPE scaling: low-frequency factor"),
      ODY_KEY("model.rope_scaling.high_freq_factor", double, model.rope_scaling.high_freq_factor,
              "Llama-3 RoPE scaling: high-frequency factor"),
      ODY_KEY("model.rope_scaling.original_max_position_embeddings", int,
              model.rope_scaling.original_max_position_embeddings,
              "Llama-3 RoPE scaling: the context the model was trained at"),
      ODY_KEY("model.tie_embeddings", bool, model.tie_embeddings,
              "Llama: the LM head shares the token embedding (GPT-2 always does)"),
      ODY_KEY("data.train", std::string, data.train,
              "training token shards: a file or a glob (llm.c format, uint16 or uint32 tokens)"),
      ODY_KEY("data.val", std::string, data.val,
              "validation token shards, file or glob; empty: no validation"),
      ODY_KEY("data.shuffle", bool, data.shuffle,
              "false: row i is tokens [i*T, i*T+T] of the data, as llm.c reads them; true: the same windows "
              "in a seeded order per epoch"),
      ODY_ENUM_KEY("data.tokenizer", data.tokenizer, kTokenizerKindNames,
                   "the tokenizer `generate` encodes prompts and decodes samples with: `bytes`, `gpt2`, "
                   "`cl100k_base`, `o200k_base`, `llama3`"),
      ODY_KEY("data.vocab_dir", std::string, data.vocab_dir,
              "the tokenizer's files (empty: `$ODYSSEY_CACHE/<tokenizer>`)"),
      ODY_KEY("train.steps", int64_t, train.steps,
              "optimizer steps; 0 writes the initial checkpoint and exits"),
      ODY_KEY("train.global_batch", int, train.global_batch,
              "rows per optimizer step, independent of the layout"),
      ODY_KEY("train.micro_batch", int, train.micro_batch,
              "rows per data-parallel rank per micro-step; accumulation = global_batch / (micro_batch x dp)"),
      ODY_KEY("train.seq_len", int, train.seq_len, "tokens per row (0: `model.seq_len`; may not exceed it)"),
      ODY_KEY("train.lr", float, train.lr, "peak learning rate"),
      ODY_KEY("train.min_lr", float, train.min_lr, "learning rate at the end of the cosine schedule"),
      ODY_KEY("train.warmup_steps", int64_t, train.warmup_steps, "linear warm-up steps"),
      ODY_ENUM_KEY("train.schedule", train.schedule, kScheduleNames,
                   "learning-rate schedule after the warm-up"),
      ODY_KEY("train.weight_decay", float, train.weight_decay,
              "AdamW decay on matrices and embeddings (not on biases and norms)"),
      ODY_KEY("train.beta1", float, train.beta1, "AdamW beta1"),
      ODY_KEY("train.beta2", float, train.beta2, "AdamW beta2"),
      ODY_KEY("train.eps", float, train.eps, "AdamW epsilon"),
      ODY_KEY("train.grad_clip", float, train.grad_clip, "global gradient-norm clipping (0: off)"),
      ODY_KEY("train.seed", uint64_t, train.seed,
              "initialisation, shuffling and stochastic rounding derive from it and the step"),
      ODY_ENUM_KEY("train.precision", train.precision, kPrecisionNames,
                   "`fp32` (the exact reference) or `bf16`: fp32 master weights, moments and gradients, a "
                   "bf16 model copy rounded after each step, bf16 GEMM operands and stored activations with "
                   "fp32 accumulation, norms, softmax and loss in fp32, weight gathers in bf16 "
                   "(docs/precision.md)"),
      ODY_KEY("train.eval_every", int64_t, train.eval_every,
              "validation loss every N steps (0: only at the end)"),
      ODY_KEY("train.eval_rows", int, train.eval_rows, "rows of `data.val` per validation (0: all)"),
      ODY_KEY("train.threads", int, train.threads,
              "OpenMP threads per rank (0: the host's cores / ranks on the host, or OMP_NUM_THREADS)"),
      ODY_KEY("train.exit_after", int64_t, train.exit_after,
              "stop after N steps of this invocation, with a checkpoint; resume later with "
              "`checkpoint.resume` (0: never)"),
      ODY_KEY(
          "train.host_memory_gb", double, train.host_memory_gb,
          "memory budget per host for the start-up check, GiB (0: MemAvailable before the ranks allocate)"),
      ODY_KEY("train.gemm_gflops", double, train.gemm_gflops,
              "MFU's denominator, stated: fp32 GFLOP/s per rank (0: the peak of the cores each rank computes "
              "on, from `odyssey info`)"),
      ODY_KEY("parallel.dp", int, parallel.dp, "data-parallel degree (0: world size / the other degrees)"),
      ODY_KEY("parallel.sp_ulysses", int, parallel.sp_ulysses,
              "DeepSpeed-Ulysses sequence-parallel degree (all-to-all over heads)"),
      ODY_KEY("parallel.sp_ring", int, parallel.sp_ring, "ring-attention sequence-parallel degree"),
      ODY_ENUM_KEY("parallel.sp_ring_layout", parallel.sp_ring_layout, kRingLayoutNames,
                   "token order across ring ranks (`zigzag` balances causal work)"),
      ODY_KEY("parallel.tp", int, parallel.tp,
              "tensor-parallel degree (Megatron column/row linears, vocabulary-parallel head)"),
      ODY_KEY("parallel.tp_sp", bool, parallel.tp_sp,
              "Megatron sequence parallelism under tp > 1: norms and residuals on token slices"),
      ODY_ENUM_KEY("parallel.tp_overlap", parallel.tp_overlap, kTpOverlapNames,
                   "`domino` hides the tp reductions behind the other half of the micro-batch"),
      ODY_ENUM_KEY("parallel.domino_split", parallel.domino_split, kDominoSplitNames,
                   "Domino's halves: `rows` (micro_batch even) or `tokens` (micro_batch 1)"),
      ODY_KEY("parallel.pp", int, parallel.pp, "pipeline-parallel degree"),
      ODY_ENUM_KEY(
          "parallel.pp_schedule", parallel.pp_schedule, kPipelineScheduleNames,
          "pipeline schedule (`interleaved` needs pp_virtual >= 2; `zb1` and `gpipe` ZeRO 0-1 only)"),
      ODY_KEY("parallel.pp_virtual", int, parallel.pp_virtual, "pipeline stages per pp rank"),
      {"parallel.pp_layers",
       documented(make_int_list_key([](auto& c) -> auto& { return c.parallel.pp_layers; }),
                  "layers of each of the pp x pp_virtual stages (empty: an even split counting the "
                  "embeddings and head as a layer each)")},
      ODY_KEY("parallel.zero_stage", int, parallel.zero_stage,
              "ZeRO stage 0-3 over dp x sp: 1 shards optimizer state, 2 also gradients, 3 also parameters"),
      ODY_KEY("parallel.ranks_per_node", int, parallel.ranks_per_node,
              "ranks that count as one node (0: as MPI reports the hosts); emulates nodes on one host"),
      ODY_KEY("parallel.bucket_mb", double, parallel.bucket_mb,
              "gradient bucket size, MB (0: one bucket per unit)"),
      ODY_ENUM_KEY("comm.weights", comm.weights, kWeightCommNames,
                   "compressed weight communication: ZeRO++ qwZ (`int8`, `int4`) or SDP4Bit weight "
                   "differences (`qwd`)"),
      ODY_ENUM_KEY("comm.grads", comm.grads, kGradCommNames,
                   "compressed gradient communication: one-level `int8`/`int4`, ZeRO++ `qgz`, SDP4Bit "
                   "two-level `tlq`, `tlq_hs`"),
      ODY_KEY("comm.hpz", bool, comm.hpz,
              "ZeRO++ hierarchical partitioning: backward gathers inside the node (ZeRO-3)"),
      ODY_KEY("comm.grad_pipeline", int, comm.grad_pipeline,
              "slices of the two-level gradient reduce-scatter, overlapping its intra- and inter-node hops "
              "(1-64)"),
      ODY_ENUM_KEY(
          "comm.overlap_thread", comm.overlap_thread, kOverlapThreadNames,
          "ZeRO's unit gathers and gradient reductions on a communication thread, so they move while "
          "the rank computes (`auto`: when dp spans nodes; needs MPI_THREAD_MULTIPLE, else off with "
          "a note); the same numbers bit for bit"),
      ODY_KEY("checkpoint.dir", std::string, checkpoint.dir,
              "the run directory: `step_XXXXXXXX/` checkpoints and `metrics.jsonl`"),
      ODY_KEY("checkpoint.every", int64_t, checkpoint.every,
              "save every N steps (0: only at the end; a checkpoint is always written at the end)"),
      ODY_KEY("checkpoint.keep", int, checkpoint.keep, "newest complete checkpoints kept (0: all)"),
      ODY_KEY("checkpoint.resume", bool, checkpoint.resume,
              "continue from the newest complete checkpoint in `checkpoint.dir`, under any layout"),
      ODY_KEY("checkpoint.overwrite", bool, checkpoint.overwrite,
              "a fresh run deletes another run's checkpoints and metrics in `checkpoint.dir` instead of "
              "refusing"),
      ODY_ENUM_KEY(
          "memory.checkpoint", memory.checkpoint, kCheckpointPolicyNames,
          "what a layer keeps for its backward (none, cheap, keep_attention, full: less memory, more "
          "recompute; auto: the first that fits); every choice gives the same numbers bit for bit"),
      ODY_KEY(
          "memory.head_chunk_tokens", int, memory.head_chunk_tokens,
          "the LM head and its loss run fused over chunks of this many tokens (0: the whole micro-batch)"),
      ODY_KEY("memory.chunk_tokens", int, memory.chunk_tokens,
              "a layer's token-local ops (and in one process or under Ulysses its attention, per query "
              "chunk) run over chunks of this many rows (0: the whole micro-batch)"),
      ODY_ENUM_KEY("memory.tier", memory.tier, kMemoryTierNames,
                   "where keep_attention and full keep the layer inputs: `ram`, or `disk` (a scratch file "
                   "per rank in `memory.offload_dir`)"),
      ODY_KEY("memory.offload_dir", std::string, memory.offload_dir,
              "a directory on a local disk for the disk tier's scratch files (required with `memory.tier = "
              "disk`)"),
      ODY_KEY("memory.disk_budget_gb", double, memory.disk_budget_gb,
              "disk the scratch files of this host's ranks may take, GiB (0: 90% of the free space of "
              "`memory.offload_dir`)"),
      ODY_KEY("log.metrics", std::string, log.metrics,
              "metrics file, one JSON line per logged step (empty: `<checkpoint.dir>/metrics.jsonl`)"),
      ODY_KEY("log.every", int64_t, log.every,
              "log a metrics line every N steps (and at validations and the last step)"),
      ODY_KEY("log.comm_trace", bool, log.comm_trace,
              "record every collective call of a step (group, kind, level, count, dtype, bus bytes) in its "
              "metrics line's `comm.trace`, as `ODYSSEY_COMM_TRACE=1` does; what `odyssey plan --check` "
              "compares with the plan"),
  };
  return table;
}
#undef ODY_KEY
#undef ODY_ENUM_KEY

// Limits of issue 42 (docs/reliability-hardening.md): each named in its error.
constexpr const char* kLayoutKeys = "parallel.sp_ulysses x parallel.sp_ring x parallel.tp x parallel.pp";
constexpr int64_t kMaxPipelineMicroBatches = 1 << 16;  // the schedule is built per micro-batch
constexpr int kThreadsPerCpu = 4;
constexpr double kMaxBudgetGb = double(int64_t{1} << 30);  // 1 EiB

int host_logical_cpus() {
  return std::max(1, int(std::thread::hardware_concurrency()));
}

const Key& find_key(const std::string& name, const std::string& source) {
  auto it = keys().find(name);
  ODY_CHECK(it != keys().end(), "{}: unknown config key '{}'", source, name);
  return it->second;
}

}  // namespace

RunConfig parse_run_config(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  RunConfig config;
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description());
  }
  // Keys of a section, and of its sub-tables ([model.rope_scaling] holds model.rope_scaling.*).
  auto read_table = [&](auto& self, const toml::table& table, const std::string& prefix) -> void {
    for (auto& [key, value] : table) {
      const std::string name = prefix + "." + std::string(key.str());
      if (value.is_table() && !keys().count(name))
        self(self, *value.as_table(), name);
      else
        find_key(name, source).from_toml(config, value, name);
    }
  };
  for (auto& [section, node] : root) {
    std::string sname(section.str());
    ODY_CHECK(node.is_table(), "{}: '{}' must be a section like [{}], not a value", source, sname, sname);
    read_table(read_table, *node.as_table(), sname);
  }
  for (const std::string& o : overrides) {
    auto eq = o.find('=');
    ODY_CHECK(eq != std::string::npos && eq > 0, "--set {}: expected section.key=value", o);
    std::string name = o.substr(0, eq);
    find_key(name, "--set").from_text(config, o.substr(eq + 1), name);
  }
  return config;
}

int RunConfig::layer_chunk_rows() const {
  if (parallel.tp_overlap != TpOverlap::domino) return memory.chunk_tokens;
  const int64_t tokens = int64_t(train.micro_batch) * seq_len() / (parallel.sp_ulysses * parallel.sp_ring);
  return int((parallel.tp_sp ? tokens / parallel.tp : tokens) / 2);
}

std::vector<ConfigKeyInfo> config_key_reference() {
  const nlohmann::json defaults = run_config_to_json(RunConfig{});
  std::vector<ConfigKeyInfo> rows;
  for (const auto& [name, key] : keys()) {
    const size_t dot = name.find('.');
    const nlohmann::json& value = defaults[name.substr(0, dot)][name.substr(dot + 1)];
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    if (value.is_number_float()) {
      // The shortest text that reads back as the field's value (float fields: 0.9, not 0.8999999761581421).
      const double v = value.get<double>();
      text = double(float(v)) == v ? fmt::format("{}", float(v)) : fmt::format("{}", v);
    }
    rows.push_back({name, key.type, text, key.meaning});
  }
  return rows;
}

nlohmann::json run_config_to_json(const RunConfig& config) {
  nlohmann::json record = nlohmann::json::object();
  for (const auto& [name, key] : keys()) {
    const size_t dot = name.find('.');
    record[name.substr(0, dot)][name.substr(dot + 1)] = key.to_json(config);
  }
  return record;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_run_config(read_text_file(path), path, overrides);
}

void RunConfig::validate(int world_size) const {
  validate_model(model);
  const TrainConfig& t = train;
  ODY_CHECK(t.steps >= 0, "train.steps must be >= 0, got {}", t.steps);
  ODY_CHECK(t.global_batch > 0, "train.global_batch must be positive, got {}", t.global_batch);
  ODY_CHECK(t.micro_batch > 0, "train.micro_batch must be positive, got {}", t.micro_batch);
  ODY_CHECK(t.seq_len >= 0, "train.seq_len must be >= 0 (0 = model.seq_len), got {}", t.seq_len);
  ODY_CHECK(seq_len() <= model.seq_len, "train.seq_len ({}) exceeds the model's context model.seq_len ({})",
            seq_len(), model.seq_len);
  // Token indices within a micro-batch are 32-bit (the kernels' rows: N = B x T).
  ODY_CHECK(int64_t(t.micro_batch) * seq_len() <= std::numeric_limits<int>::max(),
            "train.micro_batch ({}) x train.seq_len ({}) = {} tokens per micro-batch: at most {}",
            t.micro_batch, seq_len(), int64_t(t.micro_batch) * seq_len(), std::numeric_limits<int>::max());
  ODY_CHECK(t.lr > 0, "train.lr must be positive, got {}", t.lr);
  ODY_CHECK(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr ({}) must be in [0, train.lr={}]", t.min_lr,
            t.lr);
  ODY_CHECK(t.warmup_steps >= 0, "train.warmup_steps must be >= 0, got {}", t.warmup_steps);
  ODY_CHECK(t.beta1 >= 0 && t.beta1 < 1, "train.beta1 must be in [0, 1), got {}", t.beta1);
  ODY_CHECK(t.beta2 >= 0 && t.beta2 < 1, "train.beta2 must be in [0, 1), got {}", t.beta2);
  ODY_CHECK(t.eps > 0, "train.eps must be positive, got {}", t.eps);
  ODY_CHECK(t.weight_decay >= 0, "train.weight_decay must be >= 0, got {}", t.weight_decay);
  ODY_CHECK(t.grad_clip >= 0, "train.grad_clip must be >= 0 (0 disables), got {}", t.grad_clip);
  ODY_CHECK(t.eval_every >= 0, "train.eval_every must be >= 0, got {}", t.eval_every);
  ODY_CHECK(t.eval_rows >= 0, "train.eval_rows must be >= 0, got {}", t.eval_rows);
  ODY_CHECK(t.exit_after >= 0, "train.exit_after must be >= 0, got {}", t.exit_after);
  ODY_CHECK(t.threads >= 0, "train.threads must be >= 0, got {}", t.threads);
  // Resource keys against the host: threads beyond a few per logical CPU only oversubscribe (and tens of
  // thousands fail inside the OpenMP runtime); budgets beyond 1 EiB leave the 64-bit byte counts.
  const int max_threads = kThreadsPerCpu * host_logical_cpus();
  ODY_CHECK(
      t.threads <= max_threads,
      "train.threads ({}) is more than {} x this host's {} logical CPUs ({}); 0 takes the cores per rank",
      t.threads, kThreadsPerCpu, host_logical_cpus(), max_threads);
  ODY_CHECK(t.host_memory_gb >= 0, "train.host_memory_gb must be >= 0, got {}", t.host_memory_gb);
  ODY_CHECK(t.host_memory_gb <= kMaxBudgetGb, "train.host_memory_gb must be at most {} (1 EiB), got {}",
            kMaxBudgetGb, t.host_memory_gb);
  ODY_CHECK(t.gemm_gflops >= 0 && std::isfinite(t.gemm_gflops),
            "train.gemm_gflops must be a finite rate >= 0 (0: the hardware peak), got {}", t.gemm_gflops);
  ODY_CHECK(!data.train.empty() || t.steps == 0, "data.train must name the training token shards");

  const ParallelConfig& p = parallel;
  for (auto [name, v] : {std::pair{"parallel.sp_ulysses", p.sp_ulysses},
                         {"parallel.sp_ring", p.sp_ring},
                         {"parallel.tp", p.tp},
                         {"parallel.pp", p.pp}})
    ODY_CHECK(v >= 1, "{} must be >= 1, got {}", name, v);
  ODY_CHECK(p.dp >= 0, "parallel.dp must be >= 1 (or 0 to derive it), got {}", p.dp);
  // The degrees' product in 64 bits, refused as soon as it passes the world size (an int product of
  // two large degrees wraps, to 0 at 2^32: a division by zero).
  auto not_the_world = [&] {
    fail(
        "parallel.dp ({}) x parallel.sp_ulysses ({}) x parallel.sp_ring ({}) x parallel.tp ({}) x "
        "parallel.pp ({}) must equal the world size ({})",
        p.dp, p.sp_ulysses, p.sp_ring, p.tp, p.pp, world_size);
  };
  int64_t non_dp = 1;
  for (int degree : {p.sp_ulysses, p.sp_ring, p.tp, p.pp})
    if ((non_dp = checked_mul(non_dp, degree, kLayoutKeys)) > world_size) not_the_world();
  const int64_t dp64 = p.dp > 0 ? p.dp : world_size / non_dp;
  if (dp64 < 1 || checked_mul(dp64, non_dp, kLayoutKeys) != world_size) not_the_world();
  const int dp = int(dp64);  // <= world_size
  ODY_CHECK(p.zero_stage >= 0 && p.zero_stage <= 3, "parallel.zero_stage must be 0, 1, 2 or 3, got {}",
            p.zero_stage);
  if (p.tp > 1) {
    // Every tensor must split over tp (heads, widths; the table names the tensor and the key), and
    // under TP-SP each micro-batch's tokens on a rank into tp slices. The layers' tensors are alike: a
    // one-layer table decides (the planner's search validates thousands of layouts of an 80-layer model).
    ModelConfig one_layer = model;
    one_layer.n_layer = 1;
    (void)ParamTable(one_layer).tensor_parallel(p.tp, 0);
    const int64_t tokens = int64_t(t.micro_batch) * seq_len() / (p.sp_ulysses * p.sp_ring);
    ODY_CHECK(!p.tp_sp || tokens % p.tp == 0,
              "parallel.tp_sp: a micro-batch's {} tokens per rank (train.micro_batch x train.seq_len / "
              "sequence parallelism) do not split over parallel.tp = {}",
              tokens, p.tp);
  }
  if (p.tp_overlap == TpOverlap::domino) {
    // Domino's halves are the layers' two row chunks: each must be whole rows (rows) or half of the one
    // row's tokens (tokens), and under TP-SP split over tp again (tensor-pipeline-parallelism.md §2.4).
    const int64_t tokens = int64_t(t.micro_batch) * seq_len() / (p.sp_ulysses * p.sp_ring);
    ODY_CHECK(p.tp > 1,
              "parallel.tp_overlap = domino overlaps tensor-parallel communication: it needs "
              "parallel.tp > 1 (got {})",
              p.tp);
    ODY_CHECK(p.pp == 1, "parallel.tp_overlap = domino is not combined with parallel.pp > 1 yet (got {})",
              p.pp);
    if (p.domino_split == DominoSplit::rows)
      ODY_CHECK(t.micro_batch % 2 == 0,
                "parallel.domino_split = rows splits a micro-batch into two halves of its rows: "
                "train.micro_batch must be even (got {}; with one row use domino_split = tokens)",
                t.micro_batch);
    else
      ODY_CHECK(t.micro_batch == 1 && tokens % 2 == 0,
                "parallel.domino_split = tokens splits the one row of a micro-batch into two halves of its "
                "tokens: it needs train.micro_batch = 1 (got {}; use domino_split = rows) and an even number "
                "of tokens per rank (got {})",
                t.micro_batch, tokens);
    ODY_CHECK(!p.tp_sp || (tokens / 2) % p.tp == 0,
              "parallel.tp_overlap = domino with parallel.tp_sp: each half of a micro-batch's {} tokens per "
              "rank must split over parallel.tp = {}",
              tokens, p.tp);
    const int64_t half = (p.tp_sp ? tokens / p.tp : tokens) / 2;
    ODY_CHECK(
        memory.chunk_tokens == 0 || memory.chunk_tokens >= half,
        "parallel.tp_overlap = domino runs a layer's token-local ops in two halves of {} rows per rank: "
        "memory.chunk_tokens must be 0 or at least that (got {})",
        half, memory.chunk_tokens);
    ODY_CHECK(memory.checkpoint == CheckpointPolicy::none || memory.checkpoint == CheckpointPolicy::cheap ||
                  memory.checkpoint == CheckpointPolicy::automatic,
              "parallel.tp_overlap = domino keeps both halves' token-local activations while one half's "
              "collective is in flight: memory.checkpoint must be none, cheap or auto (which then chooses "
              "between those two), got {}",
              enum_name(kCheckpointPolicyNames, memory.checkpoint));
  }
  if (p.sp_ulysses * p.sp_ring > 1) {
    // The sequence split and the head split (of the heads a tp rank holds) must work for this model,
    // before any work starts.
    const int kv = model.kv_heads() % p.tp == 0 ? model.kv_heads() / p.tp : 1;
    try {
      check_sequence_shard(seq_len(), {p.sp_ulysses, p.sp_ring, 0, 0, p.sp_ring_layout});
      UlyssesHeads(model.n_head / p.tp, kv, p.sp_ulysses);
    } catch (const Error& e) {
      fail(
          "parallel.sp_ulysses ({}) x parallel.sp_ring ({}) with train.seq_len {}, model.n_head {}, "
          "model.n_kv_head {} and parallel.tp {}: {}",
          p.sp_ulysses, p.sp_ring, seq_len(), model.n_head, model.kv_heads(), p.tp, e.what());
    }
  }
  ODY_CHECK(p.ranks_per_node >= 0, "parallel.ranks_per_node must be >= 0, got {}", p.ranks_per_node);
  ODY_CHECK(p.ranks_per_node == 0 || world_size % p.ranks_per_node == 0,
            "parallel.ranks_per_node ({}) must divide the world size ({})", p.ranks_per_node, world_size);
  ODY_CHECK(p.bucket_mb >= 0, "parallel.bucket_mb must be >= 0 (0: one unit per bucket), got {}",
            p.bucket_mb);
  ODY_CHECK(p.bucket_mb <= kMaxBudgetGb * 1e3, "parallel.bucket_mb must be at most {} (1 EB), got {}",
            kMaxBudgetGb * 1e3, p.bucket_mb);
  ODY_CHECK(t.global_batch % checked_mul(t.micro_batch, dp, "train.micro_batch x parallel.dp") == 0,
            "train.global_batch ({}) must be a multiple of train.micro_batch ({}) x parallel.dp ({})",
            t.global_batch, t.micro_batch, dp);
  // Pipeline: the schedule must exist for this shape and the split place every layer, before any work.
  ODY_CHECK(p.pp_virtual >= 1, "parallel.pp_virtual must be >= 1, got {}", p.pp_virtual);
  ODY_CHECK(p.pp > 1 || (p.pp_virtual == 1 && p.pp_layers.empty()),
            "parallel.pp_virtual / parallel.pp_layers need parallel.pp > 1 (got parallel.pp = {})", p.pp);
  // Cheap bounds first: the step's schedule is built per micro-batch, for every layout (pp = 1 is a
  // one-stage pipeline, train/layout_builder.h).
  const int64_t m = t.global_batch / (int64_t(t.micro_batch) * dp);
  ODY_CHECK(m <= kMaxPipelineMicroBatches,
            "train.global_batch ({}) / (train.micro_batch ({}) x parallel.dp ({})) = {} micro-batches per "
            "step: a step schedules at most {}; raise train.micro_batch",
            t.global_batch, t.micro_batch, dp, m, kMaxPipelineMicroBatches);
  if (p.pp > 1) {
    // The split is built per stage.
    const int64_t stages = checked_mul(p.pp, p.pp_virtual, "parallel.pp x parallel.pp_virtual");
    // Every pipeline rank needs a layer before its schedule is built (a table per rank): interleaving
    // builds pp x pp_virtual stages, the other schedules refuse pp_virtual > 1 at once.
    const int64_t needed = p.pp_schedule == PipelineSchedule::interleaved ? stages : p.pp;
    ODY_CHECK(
        needed <= model.n_layer,
        "pipeline: model.n_layer ({}) must be at least the number of stages ({}: parallel.pp x pp_virtual)",
        model.n_layer, needed);
    build_schedule(p.pp_schedule, PipelineShape{p.pp, p.pp_virtual, int(std::max<int64_t>(m, 1))});
    check_schedule_zero_stage(p.pp_schedule, p.zero_stage);
    stage_layers(model.n_layer, int(stages), p.pp_layers);
  }
  {
    CommOptions co;
    co.weights = comm.weights;
    co.grads = comm.grads;
    co.hpz = comm.hpz;
    co.grad_pipeline = comm.grad_pipeline;
    co.ranks_per_node = p.ranks_per_node;
    // Without ranks_per_node the nodes are known only once MPI runs (the engine checks again then).
    if (p.ranks_per_node > 0)
      validate_comm(co, p.zero_stage, dp * p.sp_ulysses * p.sp_ring);  // ZeRO shards over dp x sp
    else
      validate_comm_keys(co, p.zero_stage);
    ODY_CHECK(train.precision == Precision::fp32 || !co.quantized(),
              "train.precision = bf16 does not run with comm.weights, comm.grads or comm.hpz yet");
  }
  ODY_CHECK(train.precision == Precision::fp32 || p.pp_schedule != PipelineSchedule::zb1,
            "train.precision = bf16 does not run parallel.pp_schedule = zb1 yet");
  ODY_CHECK(!checkpoint.dir.empty(), "checkpoint.dir must not be empty");
  ODY_CHECK(checkpoint.every >= 0, "checkpoint.every must be >= 0, got {}", checkpoint.every);
  ODY_CHECK(checkpoint.keep >= 0, "checkpoint.keep must be >= 0, got {}", checkpoint.keep);
  ODY_CHECK(memory.head_chunk_tokens >= 0,
            "memory.head_chunk_tokens must be >= 0 (0: the whole micro-batch at once), got {}",
            memory.head_chunk_tokens);
  ODY_CHECK(
      memory.chunk_tokens >= 0,
      "memory.chunk_tokens must be >= 0 (0: a layer's token-local ops over the whole micro-batch at once), "
      "got {}",
      memory.chunk_tokens);
  if (memory.tier == MemoryTier::disk) {
    ODY_CHECK(
        keeps_layer_inputs(memory.checkpoint) || memory.checkpoint == CheckpointPolicy::automatic,
        "memory.tier = disk stores the layer inputs that memory.checkpoint = keep_attention or full keep; "
        "it cannot be used with memory.checkpoint = {}",
        enum_name(kCheckpointPolicyNames, memory.checkpoint));
    ODY_CHECK(
        !memory.offload_dir.empty(),
        "memory.tier = disk needs memory.offload_dir, a directory on a local disk for the scratch files "
        "(not a tmpfs: that is RAM)");
  }
  ODY_CHECK(memory.disk_budget_gb >= 0,
            "memory.disk_budget_gb must be >= 0 (0: the free space of "
            "memory.offload_dir less 10%), got {}",
            memory.disk_budget_gb);
  ODY_CHECK(memory.disk_budget_gb <= kMaxBudgetGb, "memory.disk_budget_gb must be at most {} (1 EiB), got {}",
            kMaxBudgetGb, memory.disk_budget_gb);
  ODY_CHECK(log.every >= 1, "log.every must be >= 1, got {}", log.every);
}

}  // namespace odyssey
