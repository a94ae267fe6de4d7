#include "odyssey/train/sharded_checkpoint.h"

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
struct Run {
  int64_t begin = 0, end = 0;
  int64_t param_at = 0, moment_at = 0, replica_at = 0;
};

// Everything the rank's partition keeps locally (stage 0: the whole buffer, a one-rank partition).
std::vector<Run> local_runs(const ZeroEngine& engine) {
  const Partition& part = engine.partition();
  const int r = part.rank();
  std::vector<Run> runs;
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
std::vector<Run> written_runs(const ZeroEngine& engine, int dp_size, int dp_rank) {
  std::vector<Run> runs = local_runs(engine);
  if (engine.stage() > 0) return runs;
  const Range share = ShardLayout(engine.partition().dense_total(), dp_size).valid_range(dp_rank);
  std::vector<Run> clipped;
  for (const Run& run : runs) {
    const int64_t b = std::max(run.begin, share.begin), e = std::min(run.end, share.end);
    if (b < e)
      clipped.push_back({b, e, run.param_at + (b - run.begin), run.moment_at + (b - run.begin),
                         run.replica_at + (b - run.begin)});
  }
  return clipped;
}

void pause_for_tests() {
  static const char* env = std::getenv("ODYSSEY_CHECKPOINT_PAUSE_MS");
  if (env && std::atoi(env) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(env)));
}

}  // namespace

std::string save_sharded_checkpoint(Communicator& dp, const ZeroEngine& engine, const ParamTable& table,
                                    const CheckpointState& state, const std::string& run_dir, int keep) {
  Timer timer;
  const std::string tmp_dir = checkpoint_tmp_dir(run_dir, state.step);
  if (dp.rank() == 0) {
    fs::create_directories(run_dir);
    fs::remove_all(tmp_dir);  // a save of this step that was killed
    fs::create_directories(tmp_dir);
  }
  dp.barrier();

  const std::vector<Run> runs = written_runs(engine, dp.size(), dp.rank());
  // The model-weight replica, when it is not the master (every rank's is the same; each writes the
  // slice of its shard): restored on a resume under the same layout, so the run continues exactly.
  const int kinds = engine.has_weight_replica() ? 4 : 3;
  const float* storage[4] = {engine.param_storage(), engine.m_storage(), engine.v_storage(),
                             engine.model_weights().data()};
  struct Report {
    WrittenFile files[4];
  } mine;
  for (int k = 0; k < kinds; ++k) {
    std::vector<DenseRange> pieces;
    for (const Run& run : runs)
      pieces.push_back({run.begin, run.end,
                        storage[k] + (k == 0   ? run.param_at
                                      : k == 3 ? run.replica_at
                                               : run.moment_at)});
    pause_for_tests();
    mine.files[k] = write_slice_file(tmp_dir, checkpoint_kinds()[size_t(k)], dp.rank(), table, pieces);
  }
  // Also the barrier: rank 0 commits only once every rank's files are complete.
  std::vector<Report> all(size_t(dp.size()));
  dp.all_gather(&mine, all.data(), sizeof(Report), DType::u8);

  const std::string final_dir = run_dir + "/" + checkpoint_step_name(state.step);
  if (dp.rank() == 0) {
    std::vector<std::vector<WrittenFile>> files(static_cast<size_t>(kinds));
    for (int k = 0; k < kinds; ++k)
      for (const Report& r : all) files[size_t(k)].push_back(r.files[k]);
    CheckpointState s = state;
    if (kinds == 4) s.layout["weights_replica"] = engine.replica_layout();
    pause_for_tests();
    commit_checkpoint(run_dir, tmp_dir, s, table, dp.size(), files, keep);
  }
  dp.barrier();  // nobody reads or resumes before rank 0 has renamed it into place
  if (dp.rank() == 0)
    log_info(
        "checkpoint step {} saved by {} ranks in {:.2f} s ({:.1f} MB per rank)", state.step, dp.size(),
        timer.seconds(),
        double(mine.files[0].bytes + mine.files[1].bytes + mine.files[2].bytes + mine.files[3].bytes) / 1e6);
  return final_dir;
}

CheckpointState load_sharded_checkpoint(const std::string& dir, ZeroEngine& engine, const ParamTable& table) {
  CheckpointState state = read_checkpoint_manifest(dir);
  const size_t P = size_t(table.total());
  // Dense staging buffers whose untouched pages cost nothing: under ZeRO-3 a rank reads and keeps only
  // its slices, so resuming holds a 1/dp share of the model state, not three dense copies.
  ZeroPages params(P), m(P), v(P);
  if (state.format_version < 2) {
    load_checkpoint(dir, table, params.data(), m.data(), v.data());
    engine.load(params.data(), m.data(), v.data());
    engine.set_completed_steps(state.step);
    return state;
  }
  check_sliced_manifest(dir, state, &table);
  // Read only what this rank keeps; the rest of the (zeroed) dense buffers is never used.
  std::vector<DenseRange> all = {{0, table.total()}}, mine;
  for (const Run& run : local_runs(engine)) mine.push_back({run.begin, run.end});
  read_slices(dir, state, table, "params", engine.stage() == 3 ? mine : all, params.data());
  bool has_moments = false, has_replica = false;
  for (const auto& k : state.manifest.at("kinds")) {
    has_moments |= k == "m";
    has_replica |= k == "weights";
  }
  if (has_moments) {
    read_slices(dir, state, table, "m", engine.stage() == 0 ? all : mine, m.data());
    read_slices(dir, state, table, "v", engine.stage() == 0 ? all : mine, v.data());
  }
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
  engine.load(params.data(), has_moments ? m.data() : nullptr, has_moments ? v.data() : nullptr,
              weights ? weights->data() : nullptr);
  engine.set_completed_steps(state.step);
  return state;
}

}  // namespace odyssey
