#include "odyssey/checkpoint/inspect.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/checkpoint/sliced.h"
#include "odyssey/core/error.h"

namespace fs = std::filesystem;

namespace odyssey {
namespace {

int inspect_one(const std::string& dir, std::ostream& out) {
  CheckpointState state;
  try {
    state = read_checkpoint_manifest(dir);
  } catch (const std::exception& e) {
    out << "PROBLEM: " << e.what() << "\n";
    return 1;
  }
  const nlohmann::json& man = state.manifest;
  const ModelConfig& mc = state.model;
  out << fmt::format("checkpoint {}\n  format_version {}, step {}, data position {} rows, seed {}\n", dir,
                     state.format_version, state.step, state.next_row, state.seed);
  out << fmt::format("  model: {} n_layer {} n_head {} d_model {} seq_len {} vocab {}\n",
                     enum_name(kArchNames, mc.arch), mc.n_layer, mc.n_head, mc.d_model, mc.seq_len,
                     mc.vocab_size);
  if (state.format_version < 2) {
    out << "  format 1 (single layout): every file's checksum verified\n";
    return 0;
  }
  out << "  written with layout " << state.layout.dump() << "\n";
  if (!state.schedule.empty()) out << "  schedule " << state.schedule.dump() << "\n";
  out << "  kinds " << man.at("kinds").dump() << "\n";

  // tensor -> kind -> "file [b, e)" entries.
  std::map<std::string, std::map<std::string, std::vector<std::string>>> holders;
  int problems = 0;
  out << "  files:\n";
  for (auto& [name, info] : man.at("files").items()) {
    const auto found = verify_slice_file(dir, name, info);
    out << fmt::format("    {:<32} rank {:>4} {:>12} bytes  xxh3 {}  {}\n", name, info.at("rank").get<int>(),
                       info.at("bytes").get<uint64_t>(), info.at("xxh3_64").get<std::string>(),
                       found.empty() ? "ok" : "BAD");
    for (const std::string& p : found) out << "      PROBLEM: " << p << "\n";
    problems += int(found.size());
    for (const auto& s : info.at("slices"))
      holders[s.at("tensor")][info.at("kind")].push_back(
          fmt::format("{} {}[{}, {})", name, s.contains("box") ? "box " + s.at("box").dump() + " " : "",
                      s.at("begin").get<int64_t>(), s.at("end").get<int64_t>()));
  }
  out << "  tensors (global shape; slices as file [begin, end) of the flattened tensor, or of a box's\n"
         "  row-major order when a box [[lo, hi] per dimension] is given):\n";
  for (const auto& t : man.at("tensors")) {
    const std::string name = t.at("name");
    out << fmt::format("    {} {}\n", name, st_shape_string(t.at("shape").get<std::vector<int64_t>>()));
    for (const auto& [kind, where] : holders[name]) {
      out << fmt::format("      {:<6}", kind);
      for (size_t i = 0; i < where.size(); ++i) out << (i ? ", " : " ") << where[i];
      out << "\n";
    }
  }
  out << fmt::format("  {} files, {} problems\n", man.at("files").size(), problems);
  return problems;
}

}  // namespace

int inspect_checkpoint(const std::string& path, std::ostream& out) {
  ODY_CHECK(fs::is_directory(path), "checkpoint {}: no such directory", path);
  if (fs::exists(fs::path(path) / "manifest.json")) return inspect_one(path, out);
  const std::string base = fs::path(path).filename().string();
  if (base.rfind(".step_", 0) == 0 || base.rfind("step_", 0) == 0) {
    out << "PROBLEM: " << path << ": incomplete checkpoint (no manifest.json: the save did not finish); "
        << "resume never loads it\n";
    return 1;
  }
  std::vector<std::string> complete, incomplete;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory()) continue;
    if (name.rfind("step_", 0) == 0 && fs::exists(e.path() / "manifest.json"))
      complete.push_back(name);
    else if (name.rfind("step_", 0) == 0 || name.rfind(".step_", 0) == 0)
      incomplete.push_back(name);
  }
  std::sort(complete.begin(), complete.end());
  std::sort(incomplete.begin(), incomplete.end());
  ODY_CHECK(!complete.empty() || !incomplete.empty(),
            "{}: neither a checkpoint nor a run directory holding one", path);
  int problems = 0;
  for (const std::string& c : complete) problems += inspect_one(path + "/" + c, out);
  for (const std::string& i : incomplete)
    out << "incomplete: " << path << "/" << i << " (no manifest: an interrupted save; ignored by resume)\n";
  out << fmt::format("run {}: {} complete checkpoint(s), newest {}; {} incomplete; {} problems\n", path,
                     complete.size(), complete.empty() ? "none" : complete.back(), incomplete.size(),
                     problems);
  return problems;
}

}  // namespace odyssey
