#include "odyssey/train/run_checkpoint.h"

#include <algorithm>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/same_model.h"
#include "odyssey/core/error.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/core/zero_pages.h"
#include "odyssey/train/sharded_checkpoint.h"

namespace odyssey {

int64_t resume_or_init(Layout& layout) {
  const RunConfig& config = layout.config;
  const TrainConfig& tc = config.train;
  const std::string latest = config.checkpoint.resume ? find_latest_checkpoint(config.checkpoint.dir) : "";
  if (latest.empty()) {
    // Only what each engine keeps is initialised: under ZeRO-3 the rest of the dense buffer stays
    // untouched zero pages, so a fresh start holds a 1/dp share of the parameters, like a resume.
    // A stage's tensors draw the whole model's values (init streams keyed by the tensor's index), so
    // every layout starts from the same weights.
    for (size_t c = 0; c < layout.stages.size(); ++c) {
      const ParamTable& table = layout.stages[c]->table();
      ZeroPages params(size_t(table.total()));
      for (const Range& r : layout.engines[c]->param_ranges_loaded())
        layout.arch.init(params.data(), table, config.model, tc.seed, r.begin, r.end);
      layout.engines[c]->load(params.data());
    }
    return 0;
  }
  CheckpointState state = read_checkpoint_manifest(latest);
  check_same_model(config.model, state.model, latest);
  Timer load_timer;
  for (size_t c = 0; c < layout.stages.size(); ++c)
    state = load_sharded_checkpoint(latest, *layout.engines[c], layout.stages[c]->table(),
                                    layout.ranges.size() > 1);
  const double load_s = load_timer.seconds();
  ODY_CHECK(state.next_row == uint64_t(state.step) * uint64_t(tc.global_batch),
            "checkpoint {} was written with a different train.global_batch (data position {} after {} steps)",
            latest, state.next_row, state.step);
  if (layout.root())
    log_info("resumed from {} (step {}, written at world size {}, ZeRO stage {}, pp {}; loaded in {:.2f} s)",
             latest, state.step, state.layout.value("world_size", 0), state.layout.value("zero_stage", 0),
             state.layout.value("pp", 1), load_s);
  return state.step;
}

std::string save_run_checkpoint(Layout& layout, int64_t step, const LrSchedule& schedule) {
  const RunConfig& config = layout.config;
  const TrainConfig& tc = config.train;
  const ParallelConfig& pc = config.parallel;
  CheckpointState state;
  state.model = config.model;
  state.step = step;
  state.next_row = uint64_t(step) * uint64_t(tc.global_batch);
  state.seed = tc.seed;
  state.run = run_config_to_json(config);
  state.layout = {{"world_size", layout.world.size()},
                  {"dp", layout.dp().size()},
                  {"zero_stage", pc.zero_stage},
                  {"tp", pc.tp},
                  {"pp", pc.pp},
                  {"sp_ulysses", pc.sp_ulysses},
                  {"sp_ring", pc.sp_ring},
                  {"bucket_mb", pc.bucket_mb}};
  if (pc.pp > 1) {
    state.layout["pp_schedule"] = enum_name(kPipelineScheduleNames, pc.pp_schedule);
    state.layout["pp_virtual"] = pc.pp_virtual;
  }
  if (pc.pp > 1 || pc.tp > 1) state.layout["tp_sp"] = pc.tp_sp;
  state.schedule = {{"name", enum_name(kScheduleNames, tc.schedule)},
                    {"lr", tc.lr},
                    {"min_lr", tc.min_lr},
                    {"warmup_steps", tc.warmup_steps},
                    {"total_steps", tc.steps},
                    {"step", step},
                    {"next_lr", schedule.at(std::min(step, std::max<int64_t>(tc.steps - 1, 0)))}};
  // Every stage writes its tensors (the tied copy once, by the first stage) and every tp rank its
  // pieces (a tensor several hold, once, by the first holder), as boxes of the global tensors.
  std::vector<CheckpointPart> parts;
  for (size_t c = 0; c < layout.stages.size(); ++c)
    parts.push_back({layout.engines[c].get(), &layout.stages[c]->table(), layout.step.norm_skip[c]});
  return save_sharded_checkpoint(layout.world, layout.replicas(), parts, ParamTable(layout.config.model),
                                 state, config.checkpoint.dir, config.checkpoint.keep,
                                 layout.tp_linears ? &layout.grid.tp() : nullptr);
}

}  // namespace odyssey
