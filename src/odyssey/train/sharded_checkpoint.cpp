#include "odyssey/train/sharded_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "odyssey/checkpoint/sliced.h"
#include "odyssey/core/error.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"

namespace fs = std::filesystem;

namespace odyssey {
namespace {

// A run of dense elements this rank holds, and where they sit in its parameter and moment storage.
struct Run {
  int64_t begin = 0, end = 0;
  int64_t param_at = 0, moment_at = 0;
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
    runs.push_back({seg.dense.begin + valid.begin, seg.dense.begin + valid.end,
                    engine.param_storage_local() ? local : seg.padded_begin + valid.begin, local});
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
    if (b < e) clipped.push_back({b, e, run.param_at + (b - run.begin), run.moment_at + (b - run.begin)});
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
  const float* storage[3] = {engine.param_storage(), engine.m_storage(), engine.v_storage()};
  struct Report {
    WrittenFile files[3];
  } mine;
  for (int k = 0; k < 3; ++k) {
    std::vector<DenseRange> pieces;
    for (const Run& run : runs)
      pieces.push_back({run.begin, run.end, storage[k] + (k == 0 ? run.param_at : run.moment_at)});
    pause_for_tests();
    mine.files[k] = write_slice_file(tmp_dir, checkpoint_kinds()[size_t(k)], dp.rank(), table, pieces);
  }
  // Also the barrier: rank 0 commits only once every rank's files are complete.
  std::vector<Report> all(size_t(dp.size()));
  dp.all_gather(&mine, all.data(), sizeof(Report), DType::u8);

  const std::string final_dir = run_dir + "/" + checkpoint_step_name(state.step);
  if (dp.rank() == 0) {
    std::vector<std::vector<WrittenFile>> files(3);
    for (int k = 0; k < 3; ++k)
      for (const Report& r : all) files[size_t(k)].push_back(r.files[k]);
    pause_for_tests();
    commit_checkpoint(run_dir, tmp_dir, state, table, dp.size(), files, keep);
  }
  dp.barrier();  // nobody reads or resumes before rank 0 has renamed it into place
  if (dp.rank() == 0)
    log_info("checkpoint step {} saved by {} ranks in {:.2f} s ({:.1f} MB per rank)", state.step, dp.size(),
             timer.seconds(), double(mine.files[0].bytes + mine.files[1].bytes + mine.files[2].bytes) / 1e6);
  return final_dir;
}

CheckpointState load_sharded_checkpoint(const std::string& dir, ZeroEngine& engine, const ParamTable& table) {
  CheckpointState state = read_checkpoint_manifest(dir);
  const size_t P = size_t(table.total());
  FloatBuffer params(P), m(P), v(P);
  if (state.format_version < 2) {
    load_checkpoint(dir, table, params.data(), m.data(), v.data());
    engine.load(params.data(), m.data(), v.data());
    return state;
  }
  check_sliced_manifest(dir, state, &table);
  // Read only what this rank keeps; the rest of the (zeroed) dense buffers is never used.
  std::vector<DenseRange> all = {{0, table.total()}}, mine;
  for (const Run& run : local_runs(engine)) mine.push_back({run.begin, run.end});
  read_slices(dir, state, table, "params", engine.stage() == 3 ? mine : all, params.data());
  bool has_moments = false;
  for (const auto& k : state.manifest.at("kinds")) has_moments |= k == "m";
  if (has_moments) {
    read_slices(dir, state, table, "m", engine.stage() == 0 ? all : mine, m.data());
    read_slices(dir, state, table, "v", engine.stage() == 0 ? all : mine, v.data());
  }
  engine.load(params.data(), has_moments ? m.data() : nullptr, has_moments ? v.data() : nullptr);
  return state;
}

}  // namespace odyssey
