// Checkpoint resharding through boxes (checkpoint/box.h): the fp32 master weights of a GPT-2 124M-shaped
// model written once at tp 2 (each tp rank ZeRO-split in 2) and once 1-D (4 ZeRO ranges, no tp), then
// every rank of each reading layout (tp 1, tp 2, tp 4, and the 1-D 4-way split) reads exactly its part,
// one rank after another in this process. Printed as one JSON object: seconds and GB/s (params bytes
// per second) per (written, read) pair; page cache warm (the files were just written). Reading a
// tp-written checkpoint 1-D, or the reverse, costs the strided copies the boxes need; the same-layout
// pairs are the yardstick from the same run. Every read is checked against the global values.
// Usage: bench_checkpoint_boxes [n_layer, default 12] [directory, default the system temp dir]
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "odyssey/checkpoint/sliced.h"
#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"
#include "odyssey/train/host_info.h"

namespace fs = std::filesystem;
using namespace odyssey;

namespace {

struct Layout {
  const char* name;
  int tp, zero;
};

float global_value(const ParamInfo& p, int64_t g) {
  return float(p.index) + float(g % 4099) * 0.25f;
}

std::vector<float> local_values(const ParamTable& local) {
  std::vector<float> buf(size_t(local.total()), 0.0f);
  for (const ParamInfo& p : local.tensors())
    p.for_each_run([&](int64_t l, int64_t g, int64_t n) {
      for (int64_t i = 0; i < n; ++i) buf[size_t(p.offset + l + i)] = global_value(p, g + i);
    });
  return buf;
}

DenseRange zero_range(int64_t total, int zero, int z) {
  return {total * z / zero, total * (z + 1) / zero};
}

}  // namespace

int main(int argc, char** argv) {
  ModelConfig c;  // GPT-2 124M shapes
  if (argc > 1) c.n_layer = std::atoi(argv[1]);
  const std::string root = (argc > 2 ? fs::path(argv[2]) : fs::temp_directory_path()) /
                           fmt::format("ody_bench_boxes_{}", getpid());
  const ParamTable model(c);
  const std::vector<Layout> writers = {{"tp2_zero2", 2, 2}, {"1d_zero4", 1, 4}};
  const std::vector<Layout> readers = {{"tp1", 1, 1}, {"tp2", 2, 1}, {"tp4", 4, 1}, {"1d_zero4", 1, 4}};
  nlohmann::json out = {{"bench", "checkpoint_boxes"},
                        {"host", host_json()},
                        {"n_layer", c.n_layer},
                        {"params", model.total()},
                        {"params_bytes", model.total() * 4},
                        {"write", nlohmann::json::object()},
                        {"read", nlohmann::json::array()}};
  try {
    for (const Layout& w : writers) {
      const std::string run = root + "/" + w.name, tmp = checkpoint_tmp_dir(run, 1);
      fs::create_directories(tmp);
      std::vector<std::vector<WrittenFile>> files(1);
      double seconds = 0;
      for (int r = 0; r < w.tp; ++r) {
        const ParamTable local = model.tensor_parallel(w.tp, r);
        const std::vector<float> values = local_values(local);
        for (int z = 0; z < w.zero; ++z) {
          DenseRange piece = zero_range(local.total(), w.zero, z);
          piece.data = values.data() + piece.begin;
          Timer timer;
          files[0].push_back(
              write_slice_file(tmp, "params", r * w.zero + z, local, {piece}, TpPiece{w.tp, r}));
          seconds += timer.seconds();
        }
      }
      CheckpointState state;
      state.model = c;
      state.step = 1;
      const std::string dir = commit_checkpoint(run, tmp, state, model, w.tp * w.zero, {"params"}, files, 0);
      out["write"][w.name] = {{"seconds", seconds},
                              {"format_version", read_checkpoint_manifest(dir).format_version}};
      for (const Layout& rd : readers) {
        const CheckpointState st = read_checkpoint_manifest(dir);
        double read_seconds = 0;
        for (int r = 0; r < rd.tp; ++r) {
          const ParamTable local = model.tensor_parallel(rd.tp, r);
          const std::vector<float> want = local_values(local);
          for (int z = 0; z < rd.zero; ++z) {
            const DenseRange range = zero_range(local.total(), rd.zero, z);
            std::vector<float> got(size_t(local.total()), 0.0f);
            Timer timer;
            read_slices(dir, st, local, "params", {range}, got.data());
            read_seconds += timer.seconds();
            for (int64_t i = range.begin; i < range.end; ++i)
              ODY_CHECK(got[size_t(i)] == want[size_t(i)],
                        "written {} read {}: element {} of rank {} differs", w.name, rd.name, i, r);
          }
        }
        out["read"].push_back({{"written", w.name},
                               {"read", rd.name},
                               {"seconds", read_seconds},
                               {"gbps", double(model.total()) * 4 / read_seconds / 1e9}});
      }
    }
  } catch (const std::exception& e) {
    fs::remove_all(root);
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  fs::remove_all(root);
  fmt::print("{}\n", out.dump(1));
  return 0;
}
