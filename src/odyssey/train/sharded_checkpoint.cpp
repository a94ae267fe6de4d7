#include "odyssey/train/sharded_checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "odyssey/checkpoint/sliced.h"
#include "odyssey/core/error.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/core/zero_pages.h"

namespace fs = std::filesystem;

namespace odyssey {
namespace {

// A run of dense elements this rank holds, and where they sit in its parameter and moment storage
// and (stages 1-2) in the padded model-weight replica.
struct DenseRun {
  int64_t begin = 0, end = 0;
  int64_t param_at = 0, state_at = 0, replica_at = 0;
};

// Everything the rank's partition keeps locally (stage 0: the whole buffer, a one-rank partition).
std::vector<DenseRun> local_runs(const ZeroEngine& engine) {
  const Partition& part = engine.partition();
  const int r = part.rank();
  std::vector<DenseRun> runs;
  for (const Partition::Segment& seg : part.segments()) {
    const Range valid = seg.layout.valid_range(r);
    if (valid.empty()) continue;
    const int64_t local = seg.local_begin + valid.begin - seg.layout.shard_range(r).begin;
    const int64_t padded = seg.padded_begin + valid.begin;
    runs.push_back({seg.dense.begin + valid.begin, seg.dense.begin + valid.end,
                    engine.param_storage_local() ? local : padded, local, padded});
  }
  return runs;
}

// What this dp rank writes: its shard, or under ZeRO-0 (everything replicated) an equal share.
std::vector<DenseRun> written_runs(const ZeroEngine& engine, int dp_size, int dp_rank) {
  std::vector<DenseRun> runs = local_runs(engine);
  if (engine.stage() > 0) return runs;
  const Range share = ShardLayout(engine.partition().dense_total(), dp_size).valid_range(dp_rank);
  std::vector<DenseRun> clipped;
  for (const DenseRun& run : runs) {
    const int64_t b = std::max(run.begin, share.begin), e = std::min(run.end, share.end);
    if (b < e)
      clipped.push_back({b, e, run.param_at + (b - run.begin), run.state_at + (b - run.begin),
                         run.replica_at + (b - run.begin)});
  }
  return clipped;
}

constexpr size_t kMaxKinds = 8;  // params, the optimizer's states, weights

void pause_for_tests() {
  static const char* env = std::getenv("ODYSSEY_CHECKPOINT_PAUSE_MS");
  if (env && std::atoi(env) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(env)));
}

}  // namespace

std::string save_sharded_checkpoint(Communicator& dp, const ZeroEngine& engine, const ParamTable& table,
                                    const CheckpointState& state, const std::string& run_dir, int keep) {
  return save_sharded_checkpoint(dp, dp, {{&engine, &table, {}}}, table, state, run_dir, keep);
}

std::string save_sharded_checkpoint(Communicator& writers, Communicator& dp,
                                    const std::vector<CheckpointPart>& parts, const ParamTable& model,
                                    const CheckpointState& state, const std::string& run_dir, int keep,
                                    Communicator* tp) {
  Timer timer;
  const std::string tmp_dir = checkpoint_tmp_dir(run_dir, state.step);
  if (writers.rank() == 0) {
    fs::create_directories(run_dir);
    fs::remove_all(tmp_dir);  // a save of this step that was killed
    fs::create_directories(tmp_dir);
  }
  writers.barrier();

  // The kinds every part writes: the master weights, the optimizer's state and the model-weight
  // replica when it is not the master (every rank's is the same; each writes the slice of its shard):
  // that is restored on a resume under the same layout, so the run continues exactly.
  struct Kind {
    std::string name;
    const float* storage;
    int64_t DenseRun::*at;  // where a run sits in this storage
  };
  auto kinds_of = [](const ZeroEngine& engine) {
    std::vector<Kind> kinds = {{"params", engine.param_storage(), &DenseRun::param_at}};
    const std::vector<std::string>& state_names = engine.optimizer().state_names();
    for (size_t k = 0; k < state_names.size(); ++k)
      kinds.push_back({state_names[k], engine.state_storage(k), &DenseRun::state_at});
    if (engine.has_weight_replica())
      kinds.push_back({"weights", engine.model_weights().data(), &DenseRun::replica_at});
    ODY_CHECK(kinds.size() <= kMaxKinds, "checkpoint: {} kinds of state, at most {}", kinds.size(),
              kMaxKinds);
    return kinds;
  };
  const std::vector<Kind> kinds = kinds_of(*parts.front().engine);
  struct Report {
    WrittenFile files[kMaxKinds];
  };
  const size_t P = parts.size();
  std::vector<Report> mine(P);
  for (size_t p = 0; p < P; ++p) {
    const CheckpointPart& part = parts[p];
    std::vector<DenseRun> runs;
    for (const DenseRun& run : written_runs(*part.engine, dp.size(), dp.rank())) {
      // The run minus the skipped range (before it and after it).
      for (auto [b, e] :
           {std::pair{run.begin, part.skip.empty() ? run.end : std::min(run.end, part.skip.begin)},
            std::pair{part.skip.empty() ? run.end : std::max(run.begin, part.skip.end), run.end}})
        if (b < e)
          runs.push_back({b, e, run.param_at + (b - run.begin), run.state_at + (b - run.begin),
                          run.replica_at + (b - run.begin)});
    }
    const std::vector<Kind> part_kinds = kinds_of(*part.engine);
    for (size_t k = 0; k < part_kinds.size(); ++k) {
      std::vector<DenseRange> pieces;
      for (const DenseRun& run : runs)
        pieces.push_back({run.begin, run.end, part_kinds[k].storage + run.*part_kinds[k].at});
      if (tp && part_kinds[k].name == "params") check_tp_replicas(*tp, *part.table, pieces);
      pause_for_tests();
      mine[p].files[k] =
          write_slice_file(tmp_dir, part_kinds[k].name, writers.rank() * int(P) + int(p), *part.table, pieces,
                           tp ? TpPiece{tp->size(), tp->rank()} : TpPiece{});
    }
  }
  // Also the barrier: rank 0 commits only once every rank's files are complete.
  std::vector<Report> all(size_t(writers.size()) * P);
  writers.all_gather(mine.data(), all.data(), P * sizeof(Report), DType::u8);

  const std::string final_dir = run_dir + "/" + checkpoint_step_name(state.step);
  if (writers.rank() == 0) {
    std::vector<std::string> names;
    std::vector<std::vector<WrittenFile>> files(kinds.size());
    for (size_t k = 0; k < kinds.size(); ++k) {
      names.push_back(kinds[k].name);
      for (const Report& r : all) files[k].push_back(r.files[k]);
    }
    CheckpointState s = state;
    if (parts.front().engine->has_weight_replica())
      s.layout["weights_replica"] = parts.front().engine->replica_layout();
    pause_for_tests();
    commit_checkpoint(run_dir, tmp_dir, s, model, int(all.size()), names, files, keep);
  }
  writers.barrier();  // nobody reads or resumes before rank 0 has renamed it into place
  if (writers.rank() == 0) {
    uint64_t bytes = 0;
    for (const Report& r : mine)
      for (const WrittenFile& f : r.files) bytes += f.bytes;
    log_info("checkpoint step {} saved by {} ranks in {:.2f} s ({:.1f} MB per rank)", state.step,
             writers.size(), timer.seconds(), double(bytes) / 1e6);
  }
  return final_dir;
}

void check_tp_replicas(Communicator& tp, const ParamTable& table, const std::vector<DenseRange>& pieces) {
  const int t = tp.size();
  if (t == 1) return;
  // Per tensor the xxh3 of this rank's elements of it within the pieces, then one of the ranges.
  const size_t n = table.tensors().size();
  std::vector<uint64_t> mine(n + 1), all(size_t(t) * (n + 1));
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), XXH3_freeState);
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo& p = table.tensors()[i];
    XXH3_64bits_reset(st.get());
    for (const DenseRange& piece : pieces) {
      const int64_t b = std::max(piece.begin, p.offset), e = std::min(piece.end, p.offset + p.numel);
      if (b < e) XXH3_64bits_update(st.get(), piece.data + (b - piece.begin), size_t(e - b) * sizeof(float));
    }
    mine[i] = XXH3_64bits_digest(st.get());
  }
  std::vector<int64_t> ranges;
  for (const DenseRange& piece : pieces) ranges.insert(ranges.end(), {piece.begin, piece.end});
  mine[n] = XXH3_64bits(ranges.data(), ranges.size() * sizeof(int64_t));
  tp.all_gather(mine.data(), all.data(), (n + 1) * sizeof(uint64_t), DType::u8);
  auto at = [&](int q, size_t i) { return all[size_t(q) * (n + 1) + i]; };
  // Every rank checks every pair, so all fail alike.
  for (int q = 1; q < t; ++q)
    ODY_CHECK(
        at(q, n) == at(0, n),
        "checkpoint: tensor parallel ranks 0 and {} hold different ranges of their shards (the tables or "
        "ZeRO partitions differ)",
        q);
  for (size_t i = 0; i < n; ++i) {
    const ParamInfo& p = table.tensors()[i];
    const int holders = p.shard.whole() ? t : t / p.shard.count;  // ranks holding the same piece
    for (int q = 0; q < t && holders > 1; ++q) {
      const int first = q / holders * holders;
      ODY_CHECK(
          at(q, i) == at(first, i),
          "checkpoint: parameter {} is replicated over tensor parallel ranks but differs between tp rank {} "
          "and tp rank {} (replicas must stay bit-identical; only rank {} writes it)",
          p.name, first, q, first);
    }
  }
}

CheckpointState load_sharded_checkpoint(const std::string& dir, ZeroEngine& engine, const ParamTable& table,
                                        bool part) {
  CheckpointState state = read_checkpoint_manifest(dir);
  const size_t P = size_t(table.total());
  // Dense staging buffers whose untouched pages cost nothing: under ZeRO-3 a rank reads and keeps only
  // its slices, so resuming holds a 1/dp share of the model state, not three dense copies.
  const std::vector<std::string>& state_names = engine.optimizer().state_names();
  ZeroPages params(P);
  std::vector<std::unique_ptr<ZeroPages>> opt_state;
  std::vector<const float*> opt_ptrs;
  for (size_t k = 0; k < state_names.size(); ++k) {
    opt_state.push_back(std::make_unique<ZeroPages>(P));
    opt_ptrs.push_back(opt_state.back()->data());
  }
  if (state.format_version < 2) {
    ODY_CHECK(!part, "{}: a format-1 checkpoint resumes only without pipeline parallelism (parallel.pp = 1)",
              dir);
    ODY_CHECK(state_names == std::vector<std::string>({"m", "v"}),
              "{}: a format-1 checkpoint holds AdamW's moments, not this optimizer's state", dir);
    load_checkpoint(dir, table, params.data(), opt_state[0]->data(), opt_state[1]->data());
    engine.load(params.data(), opt_ptrs);
    engine.set_completed_steps(state.step);
    return state;
  }
  check_sliced_manifest(dir, state, &table, part);
  // Read only what this rank keeps; the rest of the (zeroed) dense buffers is never used.
  std::vector<DenseRange> all = {{0, table.total()}}, mine;
  for (const DenseRun& run : local_runs(engine)) mine.push_back({run.begin, run.end});
  std::vector<DenseRange> param_ranges;
  for (const Range& r : engine.param_ranges_loaded()) param_ranges.push_back({r.begin, r.end});
  read_slices(dir, state, table, "params", param_ranges, params.data());
  // The optimizer state when the checkpoint holds all of it (a weights-only checkpoint starts it at zero).
  size_t states_held = 0;
  bool has_replica = false;
  for (const auto& k : state.manifest.at("kinds")) {
    states_held += std::count(state_names.begin(), state_names.end(), k.get<std::string>());
    has_replica |= k == "weights";
  }
  const bool has_state = !state_names.empty() && states_held == state_names.size();
  if (has_state)
    for (size_t k = 0; k < state_names.size(); ++k)
      read_slices(dir, state, table, state_names[k], engine.stage() == 0 ? all : mine, opt_state[k]->data());
  // The saved model-weight replica only under the layout that quantized it; otherwise (or when the
  // checkpoint has none) the replica is rebuilt from the master, one quantization error away.
  std::unique_ptr<ZeroPages> weights;
  if (engine.has_weight_replica()) {
    const auto saved = state.layout.find("weights_replica");
    if (has_replica && saved != state.layout.end() && *saved == engine.replica_layout()) {
      weights = std::make_unique<ZeroPages>(P);
      read_slices(dir, state, table, "weights", all, weights->data());
    } else if (engine.partition().rank() == 0) {
      log_info("{}: {}; the model weights are rebuilt from the master weights (resume not bit-exact)", dir,
               has_replica ? "the saved model-weight replica was quantized under another layout"
                           : "no saved model-weight replica");
    }
  }
  engine.load(params.data(),
              has_state ? std::span<const float* const>(opt_ptrs) : std::span<const float* const>(),
              weights ? weights->data() : nullptr);
  engine.set_completed_steps(state.step);
  return state;
}

}  // namespace odyssey
