// odyssey: one binary, one subcommand per user-facing action (DESIGN.md, "User-facing contract").
// Every failure a user can cause ends here as one message on stderr and exit code 1.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/hf_adapter.h"
#include "odyssey/checkpoint/hf_export_dtype.h"
#include "odyssey/checkpoint/inspect.h"
#include "odyssey/comm/runtime.h"
#include "odyssey/comm/single_communicator.h"
#include "odyssey/core/error.h"
#include "odyssey/core/host_memory.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/data/dataset.h"
#include "odyssey/data/prepare.h"
#include "odyssey/data/tokenizer.h"
#include "odyssey/kernels/attention.h"
#include "odyssey/kernels/attention_isa.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/cpu_peak.h"
#include "odyssey/model/architecture.h"
#include "odyssey/plan/plan_command.h"
#include "odyssey/train/batch_loader.h"
#include "odyssey/train/config.h"
#include "odyssey/train/evaluate.h"
#include "odyssey/train/footprint.h"
#include "odyssey/train/generate.h"
#include "odyssey/train/host_info.h"
#include "odyssey/train/memory_plan.h"
#include "odyssey/train/trainer.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {

// A model with the weights of a checkpoint (a step directory or a run directory).
std::unique_ptr<Stage> load_model(const std::string& path, CheckpointState* state_out) {
  std::string dir = resolve_checkpoint(path);
  CheckpointState state = read_checkpoint_manifest(dir);
  auto model = architecture(state.model.arch).make_stage(state.model, StageRange{}, true, {});
  load_checkpoint(dir, model->table(), model->params(), nullptr, nullptr);
  if (state_out) *state_out = state;
  return model;
}

// Runs on every rank of the job (under mpirun); only rank 0 prints the result.
int cmd_train(const std::string& config_path, const std::vector<std::string>& overrides, bool dry_run,
              int world_size) {
  RunConfig config = load_run_config(config_path, overrides);
  if (world_size > 0) {
    // A layout of world_size ranks, sized without building it (train/footprint.h): one process.
    if (world().rank() != 0) return 0;
    config.validate(world_size);
    Timer timer;
    // memory.checkpoint = auto: the first policy whose largest rank fits train.host_memory_gb (or this
    // host's available memory) with parallel.ranks_per_node such ranks on a host (default 1).
    RankFootprint f;
    HostMemoryNeed need;
    std::string auto_note;
    const CheckpointPolicy policy = resolve_checkpoint(
        config,
        [&](CheckpointPolicy p) {
          f = max_rank_footprint(config, world_size, p);
          HostMemoryNeed n;
          n.state_per_rank = f.state.total() + f.comm_buffers;
          n.activations_per_rank = f.activations;
          n.offload_per_rank = f.offload;
          n.ranks_on_host = std::max(1, config.parallel.ranks_per_node);
          n.checkpoint = enum_name(kCheckpointPolicyNames, p);
          return n;
        },
        [&](const HostMemoryNeed& n) {
          return fits_host_memory(n, config.train.host_memory_gb, available_memory_bytes());
        },
        &need, &auto_note);
    const double seconds = timer.seconds();
    if (!auto_note.empty()) log_info("{}", auto_note);
    std::cout << nlohmann::json{{"dry_run", true},
                                {"world_size", world_size},
                                {"checkpoint", enum_name(kCheckpointPolicyNames, policy)},
                                {"largest_rank_bytes", f.ram()},
                                {"largest_rank_state_bytes", f.state.total()},
                                {"params_bytes", f.state.params},
                                {"grads_bytes", f.state.grads},
                                {"optimizer_bytes", f.state.optimizer},
                                {"activation_bytes", f.activations},
                                {"comm_buffer_bytes", f.comm_buffers},
                                {"offload_bytes", f.offload},
                                {"seconds", seconds}}
                     .dump()
              << std::endl;
    return 0;
  }
  TrainResult r = run_training(config, world(), dry_run);
  if (world().rank() != 0) return 0;
  if (dry_run) {
    const HostMemoryNeed& m = r.memory;
    std::cout << nlohmann::json{{"dry_run", true},
                                {"state_bytes_per_rank", m.state_per_rank},
                                {"activation_bytes_per_rank", m.activations_per_rank},
                                {"tokens_per_rank", m.tokens_per_rank},
                                {"checkpoint", m.checkpoint},
                                {"tier", m.tier},
                                {"offload_bytes_per_rank", m.offload_per_rank},
                                {"ranks_on_host", m.ranks_on_host},
                                {"host_available_bytes", r.host_available}}
                     .dump()
              << std::endl;
    return 0;
  }
  nlohmann::json out = {{"steps", r.steps},
                        {"loss", r.last_loss},
                        {"tokens_per_s", r.tokens_per_s},
                        {"checkpoint", r.checkpoint}};
  if (r.val_loss >= 0) out["val_loss"] = r.val_loss;
  if (r.stopped_by_signal) out["stopped_by_signal"] = true;
  std::cout << out.dump() << std::endl;
  return 0;
}

int cmd_eval(const std::string& checkpoint, const std::string& data, int batch, int64_t max_rows,
             int seq_len) {
  CheckpointState state;
  auto model = load_model(checkpoint, &state);
  int T = seq_len > 0 ? seq_len : state.model.seq_len;
  ODY_CHECK(T <= state.model.seq_len, "--seq-len {} exceeds the model's context {}", T, state.model.seq_len);
  TokenDataset dataset(data, T, state.model.vocab_size, false, 0);
  int64_t rows = max_rows > 0 ? std::min<int64_t>(max_rows, int64_t(dataset.rows_per_epoch()))
                              : int64_t(dataset.rows_per_epoch());
  // The training loop's evaluation, on one rank and the whole sequence.
  BatchLoader loader(dataset, batch, batch, 0, 1, SequenceShard{});
  SingleCommunicator single("eval");
  Timer timer;
  PipelineRunner runner(single, {model.get()}, PipelineShape{}, PipelineSchedule::one_f_one_b);
  double loss = evaluate(runner, loader, uint64_t(rows), 0, 1, single, nullptr);
  std::cout << nlohmann::json{{"loss", loss},
                              {"rows", rows},
                              {"tokens", rows * T},
                              {"seconds", timer.seconds()}}
                   .dump()
            << std::endl;
  return 0;
}

int cmd_generate(const std::string& checkpoint, const std::string& prompt, SamplingOptions options,
                 const std::string& tokenizer_name, const std::string& vocab_dir) {
  CheckpointState state;
  auto model = load_model(checkpoint, &state);
  std::string name = tokenizer_name, dir = vocab_dir;
  const auto& data = state.run.value("data", nlohmann::json::object());
  if (name.empty()) name = data.value("tokenizer", std::string("bytes"));
  if (dir.empty()) dir = data.value("vocab_dir", std::string());
  auto tokenizer = make_tokenizer(name, dir);
  ODY_CHECK(tokenizer->vocab_size() <= state.model.vocab_size,
            "tokenizer '{}' has {} tokens but the model's vocabulary is {}", name, tokenizer->vocab_size(),
            state.model.vocab_size);
  options.stop_token = tokenizer->eot_id();
  std::vector<int> ids = tokenizer->encode(prompt);
  std::fputs(prompt.c_str(), stdout);
  Timer timer;
  GenerationStats st;
  auto produced = generate_tokens(
      *model, ids, options,
      [&](int id) {
        if (id < tokenizer->vocab_size()) std::fputs(tokenizer->decode_one(id).c_str(), stdout);
        std::fflush(stdout);
      },
      &st);
  std::fputc('\n', stdout);
  // Prefill: prompt tokens through the model per second; decode: one new token per pass.
  log_info(
      "{} tokens in {:.2f} s ({:.1f} tokens/s overall; {}): prefill {} tokens in {:.3f} s ({:.1f} tokens/s), "
      "decode {} tokens in {:.3f} s ({:.1f} tokens/s){}",
      produced.size(), timer.seconds(), produced.size() / std::max(1e-9, timer.seconds()),
      options.use_kv_cache ? "kv cache" : "recomputing the window", st.prompt_tokens, st.prefill_s,
      st.prompt_tokens / std::max(1e-9, st.prefill_s), st.decode_steps, st.decode_s,
      st.decode_steps / std::max(1e-9, st.decode_s),
      st.slides ? fmt::format("; context full: slid {} times", st.slides) : std::string());
  return 0;
}

int cmd_prepare(PrepareOptions options) {
  Timer timer;
  PrepareSummary s = prepare_shards(options);
  uint64_t tokens = s.train_tokens + s.val_tokens;
  nlohmann::json out = {{"documents", s.documents},
                        {"train_documents", s.train_documents},
                        {"val_documents", s.val_documents},
                        {"bytes", s.bytes},
                        {"train_tokens", s.train_tokens},
                        {"val_tokens", s.val_tokens},
                        {"bytes_per_token", tokens ? double(s.bytes) / double(tokens) : 0.0},
                        {"token_bytes", token_bytes(s.width)},
                        {"train_files", s.train_files},
                        {"val_files", s.val_files},
                        {"seconds", timer.seconds()}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}

int cmd_export(const std::string& checkpoint, const std::string& to, const std::string& output,
               const std::string& dtype) {
  const ExportDtype d = parse_enum(kExportDtypeNames, dtype, "--dtype");
  const HfAdapter& adapter = hf_adapter_for_format(to, "--to");
  CheckpointState state;
  auto model = load_model(checkpoint, &state);
  ODY_CHECK(state.model.arch == adapter.arch,
            "--to {}: the checkpoint {} holds a model.arch = {} model (use {})", to,
            resolve_checkpoint(checkpoint), enum_name(kArchNames, state.model.arch),
            hf_adapter_for_arch(state.model.arch).format);
  adapter.export_weights(state.model, model->params(), output);
  convert_hf_export(output, d);
  log_info("exported {} to {} (model.safetensors in {}, config.json)", resolve_checkpoint(checkpoint), output,
           dtype);
  return 0;
}

// `odyssey --version`: what this binary is (the commit as of the build's configure step) and which
// instruction-set paths it carries and runs here.
std::string version_text() {
  std::string compiled = "portable";
#if ODYSSEY_ATTN_X86_PATHS
  compiled = "avx512 avx2 portable";
#endif
  std::string runnable;
  for (const std::string& isa : attention_isas_supported()) runnable += (runnable.empty() ? "" : " ") + isa;
  return fmt::format(
      "odyssey {} (git {}, configured {})\nbuild: {}, {}, kernels compiled for {}\n"
      "attention paths: compiled {}; this CPU runs {}; dispatched {}\noneDNN: dispatches {}",
      ODYSSEY_VERSION, ODYSSEY_GIT_COMMIT, ODYSSEY_CONFIGURED, ODYSSEY_BUILD_TYPE, ODYSSEY_COMPILER,
      kernels_isa(), compiled, runnable, attention_isa(), onednn_isa());
}

// `odyssey info`: the host record of the benchmarks plus the peak MFU divides by, factor by factor.
nlohmann::json info_json() {
  const CpuPeak& p = cpu_peak();
  nlohmann::json j = host_json();
  j["peak"] = {{"gflops_per_core", p.per_core_gflops()},
               {"fp32_lanes", p.fma.bits / 32},
               {"fma_units", p.fma.units},
               {"fma_source", p.fma.source},
               {"ghz", p.ghz},
               {"clock_source", p.clock_source},
               {"physical_cores_allowed", p.cores_allowed},
               {"physical_cores_online", p.cores_online},
               {"gflops_allowed_cores", p.per_core_gflops() * p.cores_allowed},
               {"formula", "fp32 lanes x 2 (FMA) x FMA units x GHz per core"}};
  return j;
}

// Markdown cells hold no '|' or newline.
std::string cell(std::string text) {
  for (size_t at = 0; (at = text.find('|', at)) != std::string::npos; at += 2) text.replace(at, 1, "\\|");
  return text;
}

// The configuration reference from the key table (docs/configuration.md is this output, checked by
// ctest's docs.configuration_reference).
int cmd_config_reference(const std::string& format) {
  // Sections in the order a config file has them (DESIGN.md), keys sorted within each.
  const std::vector<std::string> order = {"model", "data",       "train",  "parallel",
                                          "comm",  "checkpoint", "memory", "log"};
  auto rank = [&](const ConfigKeyInfo& r) {
    const std::string s = r.name.substr(0, r.name.find('.'));
    return std::find(order.begin(), order.end(), s) - order.begin();
  };
  std::vector<ConfigKeyInfo> rows = config_key_reference();
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  if (format == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const ConfigKeyInfo& r : rows)
      j.push_back({{"key", r.name}, {"type", r.type}, {"default", r.default_value}, {"meaning", r.meaning}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout
      << "<!-- Generated by `odyssey config-reference --format markdown` from the key table in\n"
         "     src/odyssey/train/config.cpp. Do not edit: change the table and regenerate (ctest checks). "
         "-->\n"
         "# Configuration reference\n\n"
         "A run is configured by a TOML file with the sections below; `--set section.key=value` overrides "
         "any key\non the command line. Unknown keys, wrong types and impossible values or layouts are "
         "errors that name\nthe key, before any work. Every key's value is written into each "
         "checkpoint's manifest (`run`).\nDefaults are those of a config that leaves the key out; an "
         "empty default is the empty string.\n";
  std::string section;
  for (const ConfigKeyInfo& r : rows) {
    const std::string s = r.name.substr(0, r.name.find('.'));
    if (s != section) {
      section = s;
      std::cout << "\n## [" << section << "]\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    std::cout << "| `" << r.name << "` | " << cell(r.type) << " | "
              << (r.default_value.empty() ? std::string() : "`" + cell(r.default_value) + "`") << " | "
              << cell(r.meaning) << " |\n";
  }
  return 0;
}

int cmd_import(const std::string& from, const std::string& input, const std::string& output) {
  const HfAdapter& adapter = hf_adapter_for_format(from, "--from");
  const ModelConfig config = adapter.read_config(input);
  auto model = architecture(config.arch).make_stage(config, StageRange{}, true, {});
  adapter.import_weights(input, config, model->params());
  CheckpointState state;
  state.model = config;
  state.run = {{"imported_from", input}};
  std::string dir = save_checkpoint(output, state, model->table(), model->params(), nullptr, nullptr);
  log_info("imported {} into {}", input, dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"odyssey: train GPT-style language models on long sequences across many processes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text());

  std::string config_path;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "train a model (metrics and checkpoints in checkpoint.dir)");
  train->add_option("--config", config_path, "TOML config file")->required();
  train->add_option("--set", overrides, "override a config key: section.key=value (repeatable)");
  bool dry_run = false;
  train->add_flag(
      "--dry-run", dry_run,
      "build the layout, check the data and the memory per rank, print them and exit (writes nothing)");
  int world_size = 0;
  train
      ->add_option("--world-size", world_size,
                   "a dry run of a layout on this many ranks, sized without building it (one process): the "
                   "model state of its largest rank")
      ->check(CLI::PositiveNumber);

  std::string checkpoint, data_path;
  int eval_batch = 8, eval_seq_len = 0;
  int64_t eval_rows = 0;
  auto* eval = app.add_subcommand("eval", "mean loss of a checkpoint on token shards, as JSON");
  eval->add_option("--checkpoint", checkpoint, "checkpoint or run directory")->required();
  eval->add_option("--data", data_path, "token shard file or glob")->required();
  eval->add_option("--batch", eval_batch, "rows per forward pass")->check(CLI::PositiveNumber);
  eval->add_option("--max-rows", eval_rows, "evaluate at most this many rows (0: all)");
  eval->add_option("--seq-len", eval_seq_len, "tokens per row (default: the model's context)");

  std::string prompt, tokenizer_name, vocab_dir;
  SamplingOptions sampling;
  auto* gen = app.add_subcommand("generate", "sample text from a checkpoint");
  gen->add_option("--checkpoint", checkpoint, "checkpoint or run directory")->required();
  gen->add_option("--prompt", prompt, "text to continue")->required();
  gen->add_option("--max-tokens", sampling.max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  gen->add_option("--temperature", sampling.temperature, "softmax temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-k", sampling.top_k, "sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-p", sampling.top_p, "sample among the most likely tokens holding this mass (1: all)")
      ->check(CLI::Range(0.0, 1.0));
  gen->add_option("--seed", sampling.seed, "sampling seed");
  bool no_kv_cache = false;
  gen->add_flag("--no-kv-cache", no_kv_cache, "recompute the whole window for every token (slower)");
  gen->add_option("--tokenizer", tokenizer_name,
                  std::string(kTokenizerNames) + " (default: the one the run trained with)");
  gen->add_option("--vocab-dir", vocab_dir,
                  "the tokenizer's files (gpt2: encoder.json, vocab.bpe; others: <name>.json); default "
                  "$ODYSSEY_CACHE/<name>");

  PrepareOptions prep;
  auto* prepare = app.add_subcommand("prepare", "tokenize text files into train/val token shards");
  prepare->add_option("--input", prep.inputs, "text files (each one document)")->required();
  prepare->add_option("--output", prep.output_dir, "output directory")->required();
  prepare->add_option("--tokenizer", prep.tokenizer, kTokenizerNames);
  prepare->add_option("--vocab-dir", prep.vocab_dir,
                      "the tokenizer's files (gpt2: encoder.json, vocab.bpe; others: <name>.json); default "
                      "$ODYSSEY_CACHE/<name>");
  prepare->add_option("--val-fraction", prep.val_fraction, "share of documents for validation")
      ->check(CLI::Range(0.0, 1.0));
  bool quiet = false;
  prepare->add_flag("--quiet", quiet, "no progress bar");

  std::string to, output;
  auto* exp = app.add_subcommand("export", "export a checkpoint to another ecosystem's format");
  exp->add_option("--checkpoint", checkpoint, "checkpoint or run directory")->required();
  exp->add_option("--to", to, hf_formats())->required();
  exp->add_option("--output", output, "output directory")->required();
  std::string export_dtype = "f32";
  exp->add_option("--dtype", export_dtype, "f32 (the fp32 master weights) or bf16 (rounded to nearest)");

  std::string from, input;
  auto* imp = app.add_subcommand("import", "import a model from another ecosystem's format");
  imp->add_option("--from", from, hf_formats())->required();
  imp->add_option("--input", input, "Hugging Face model directory (config.json, model.safetensors)")
      ->required();
  imp->add_option("--output", output, "run directory to write the checkpoint into")->required();

  std::string inspect_path;
  auto* ckpt = app.add_subcommand("checkpoint", "work with checkpoints");
  ckpt->require_subcommand(1);
  auto* inspect = ckpt->add_subcommand(
      "inspect",
      "print a checkpoint's manifest, tensors and slices; verify every checksum (exit 1 on a problem)");
  inspect->add_option("DIR", inspect_path, "checkpoint or run directory")->required();

  PlanCommand plan_cmd;
  auto* plan = app.add_subcommand(
      "plan", "predict a layout's memory, bytes and step time on a cluster; search layouts");
  plan->add_option("--config", plan_cmd.config, "TOML run config (model, train, parallel, comm, memory)");
  plan->add_option("--set", plan_cmd.overrides, "override a config key: section.key=value (repeatable)");
  plan->add_option("--cluster", plan_cmd.cluster, "cluster description (configs/clusters/*.toml)");
  plan->add_option("--world", plan_cmd.world, "ranks (default: the config's degrees, or every device)");
  plan->add_flag("--json", plan_cmd.json, "print JSON instead of the table");
  plan->add_flag("--schedule", plan_cmd.schedule, "include rank 0's collective schedule (with --json)");
  plan->add_flag("--search", plan_cmd.search, "enumerate and rank layouts");
  plan->add_option("--top", plan_cmd.top, "layouts to print with --search");
  plan->add_option("--search-set", plan_cmd.search_sets, "search.key=value (repeatable)");
  plan->add_flag("--check", plan_cmd.check, "under mpirun: run the layout two steps, compare bytes exactly");
  plan->add_flag("--calibrate", plan_cmd.calibrate, "under mpirun: measure this host into --output");
  plan->add_option("--output", plan_cmd.output, "the cluster file --calibrate writes");
  plan->add_option("--ranks-per-node", plan_cmd.ranks_per_node,
                   "--calibrate: ranks per node (default: mpirun's)");

  auto* info = app.add_subcommand(
      "info", "print this host's CPU, the ISA paths, threads and the peak fp32 rate MFU divides by, as JSON");

  std::string reference_format = "markdown";
  auto* reference =
      app.add_subcommand("config-reference",
                         "print every config key with its type, default and meaning (docs/configuration.md)");
  reference->add_option("--format", reference_format, "markdown or json")
      ->check(CLI::IsMember({"markdown", "json"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // A usage error is an error like any other: one line, exit code 1.
    std::fprintf(stderr, "odyssey: error: %s (see --help)\n", e.what());
    return 1;
  }
  try {
    // Training is the multi-rank command: the MPI runtime ends every rank on an error on any.
    if (*train)
      return run_main(argc, argv,
                      [&](int, char**) { return cmd_train(config_path, overrides, dry_run, world_size); });
    if (*plan && (plan_cmd.check || plan_cmd.calibrate))
      return run_main(argc, argv, [&](int, char**) { return run_plan_collective(plan_cmd, world()); });
    if (*plan) return run_plan(plan_cmd);
    if (*eval) return cmd_eval(checkpoint, data_path, eval_batch, eval_rows, eval_seq_len);
    if (*gen) {
      sampling.use_kv_cache = !no_kv_cache;
      return cmd_generate(checkpoint, prompt, sampling, tokenizer_name, vocab_dir);
    }
    if (*prepare) {
      prep.progress = !quiet;
      return cmd_prepare(prep);
    }
    if (*exp) return cmd_export(checkpoint, to, output, export_dtype);
    if (*imp) return cmd_import(from, input, output);
    if (*info) {
      std::cout << info_json().dump() << "\n";
      return 0;
    }
    if (*reference) return cmd_config_reference(reference_format);
    if (*inspect) return inspect_checkpoint(inspect_path, std::cout) == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "odyssey: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "odyssey: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
