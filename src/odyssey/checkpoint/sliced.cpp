#include "odyssey/checkpoint/sliced.h"

#include <fcntl.h>  // AT_FDCWD
#include <xxhash.h>

#include <algorithm>
#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>

#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace fs = std::filesystem;

namespace odyssey {
namespace {

std::string hex(uint64_t h) {
  return fmt::format("{:016x}", h);
}

// Streamed, so a rank never holds a second copy of its shard.
uint64_t file_xxh3(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  ODY_CHECK(f != nullptr, "cannot open {}: {}", path, std::strerror(errno));
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), XXH3_freeState);
  XXH3_64bits_reset(st.get());
  std::vector<char> buf(size_t(4) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0)
    XXH3_64bits_update(st.get(), buf.data(), n);
  ODY_CHECK(!std::ferror(f.get()), "cannot read {}", path);
  return XXH3_64bits_digest(st.get());
}

// The tensors a listed file holds, for error messages.
std::string tensors_of(const nlohmann::json& info) {
  std::string names;
  for (const auto& s : info.at("slices")) {
    if (!names.empty()) names += ", ";
    names += s.at("tensor").get<std::string>();
  }
  return names.empty() ? "no tensors" : names;
}

// Tensors whose bytes lie at or past `size` (a truncated file).
std::string tensors_past(const nlohmann::json& info, uint64_t size) {
  std::string names;
  for (const auto& s : info.at("slices")) {
    uint64_t end = s.at("offset").get<uint64_t>() +
                   4 * uint64_t(s.at("end").get<int64_t>() - s.at("begin").get<int64_t>());
    if (end <= size) continue;
    if (!names.empty()) names += ", ";
    names += s.at("tensor").get<std::string>();
  }
  return names.empty() ? "only the header" : names;
}

// A listed slice: its box (the whole tensor when the manifest gives none: format 2) and range.
// where: the manifest or file, for errors.
BoxSlice slice_of(const nlohmann::json& s, const std::vector<int64_t>& shape, const std::string& where) {
  BoxSlice slice{whole_box(shape), s.at("begin").get<int64_t>(), s.at("end").get<int64_t>()};
  if (s.contains("box")) {
    slice.box = {};
    for (const auto& d : s.at("box")) {
      ODY_CHECK(d.is_array() && d.size() == 2, "{}: a box of tensor {} holds [lo, hi] per dimension, not {}",
                where, s.at("tensor").dump(), d.dump());
      slice.box.lo.push_back(d.at(0).get<int64_t>());
      slice.box.hi.push_back(d.at(1).get<int64_t>());
    }
  }
  return slice;
}

nlohmann::json box_json(const Box& box) {
  nlohmann::json j = nlohmann::json::array();
  for (size_t d = 0; d < box.lo.size(); ++d) j.push_back({box.lo[d], box.hi[d]});
  return j;
}

// Whether a file's header records the slice where the manifest's entry s places it.
bool header_agrees(const SafetensorsFile& file, const std::string& entry, const nlohmann::json& s) {
  const auto meta = file.metadata().find(entry);
  if (meta == file.metadata().end() || !nlohmann::json::accept(meta->second)) return false;
  try {
    const nlohmann::json m = nlohmann::json::parse(meta->second);
    return m.at("tensor") == s.at("tensor") && m.at("begin") == s.at("begin") && m.at("end") == s.at("end") &&
           m.value("box", nlohmann::json()) == s.value("box", nlohmann::json());
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void check_file_size(const std::string& dir, const std::string& name, const nlohmann::json& info) {
  const std::string path = dir + "/" + name;
  ODY_CHECK(fs::exists(path), "{}: file {} listed in the manifest is missing (it holds the {} slices of {})",
            dir, name, info.at("kind").get<std::string>(), tensors_of(info));
  const uint64_t want = info.at("bytes").get<uint64_t>(), have = fs::file_size(path);
  ODY_CHECK(have == want, "{}: size {} differs from the manifest's {} (truncated or rewritten; affects {})",
            path, have, want, have < want ? tensors_past(info, have) : tensors_of(info));
}

}  // namespace

std::string checkpoint_step_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

std::string checkpoint_tmp_dir(const std::string& run_dir, int64_t step) {
  return run_dir + "/." + checkpoint_step_name(step) + ".tmp";
}

std::string slice_file_name(const std::string& kind, int rank) {
  return fmt::format("{}.rank{:05d}.safetensors", kind, rank);
}

bool writes_tensor(const ParamInfo& p, const TpPiece& tp) {
  ODY_CHECK(tp.size >= 1 && tp.rank >= 0 && tp.rank < tp.size, "checkpoint: tensor-parallel rank {} of {}",
            tp.rank, tp.size);
  if (p.shard.whole()) return tp.rank == 0;     // replicated: tp rank 0 writes it
  const int holders = tp.size / p.shard.count;  // tp ranks holding this piece (GQA kv heads: t / K)
  ODY_CHECK(p.shard.count <= tp.size && tp.size % p.shard.count == 0 && p.shard.index == tp.rank / holders,
            "checkpoint: parameter {} holds piece {} of {}, not what tensor parallel rank {} of {} holds",
            p.name, p.shard.index, p.shard.count, tp.rank, tp.size);
  return tp.rank % holders == 0;
}

WrittenFile write_slice_file(const std::string& tmp_dir, const std::string& kind, int rank,
                             const ParamTable& table, const std::vector<DenseRange>& pieces,
                             const TpPiece& tp) {
  std::vector<StTensorRef> refs;
  std::deque<std::vector<float>> gathered;  // slices not contiguous in the piece, in box order (stable)
  std::map<std::string, std::string> meta = {
      {"format", "odyssey-slices"}, {"kind", kind}, {"rank", std::to_string(rank)}};
  for (const DenseRange& piece : pieces) {
    for (const ParamInfo& p : table.tensors()) {
      const int64_t b = std::max(piece.begin, p.offset), e = std::min(piece.end, p.offset + p.numel);
      if (e <= b || !writes_tensor(p, tp)) continue;
      // Local elements [b, e) of p: one slice per sub-parameter it holds (one for a whole tensor).
      for (const PlacedSlice& held : held_slices(p, b - p.offset, e - p.offset)) {
        const BoxSlice& slice = held.slice;
        const int64_t n = slice.end - slice.begin;
        // Where the slice's elements sit relative to piece.data.
        PlacedSlice in_piece = held;
        in_piece.base += p.offset - piece.begin;
        // Box order is the piece's own order when each dimension after the first spans the piece's.
        bool contiguous = true;
        for (size_t d = 1; d < held.stride.size(); ++d)
          contiguous &= held.stride[d - 1] == held.stride[d] * (slice.box.hi[d] - slice.box.lo[d]);
        const float* data = nullptr;
        if (contiguous) {
          data = piece.data + (in_piece.base + slice.begin);
        } else {
          gathered.emplace_back(size_t(n));
          copy_common(in_piece, piece.data, packed(slice), gathered.back().data());
          data = gathered.back().data();
        }
        const bool whole = slice.box == whole_box(p.shape);
        // Entries are named "<tensor>@<begin>" ("<tensor>@<box>+<begin>" for a box): a rank may hold
        // several slices of one tensor.
        const std::string entry = whole ? fmt::format("{}@{}", p.name, slice.begin)
                                        : fmt::format("{}@{}+{}", p.name, box_string(slice.box), slice.begin);
        refs.push_back({entry, StDtype::F32, {n}, data});
        // The slice's place in the global tensor travels with it; the checksum lets readers verify
        // just the slices they use.
        nlohmann::json m = {{"tensor", p.name},
                            {"shape", p.shape},
                            {"begin", slice.begin},
                            {"end", slice.end},
                            {"xxh3_64", hex(XXH3_64bits(data, size_t(n) * sizeof(float)))}};
        if (!whole) m["box"] = box_json(slice.box);
        meta[entry] = m.dump();
      }
    }
  }
  const std::string path = tmp_dir + "/" + slice_file_name(kind, rank);
  write_safetensors(path, refs, meta);
  return {fs::file_size(path), file_xxh3(path)};
}

std::string commit_checkpoint(const std::string& run_dir, const std::string& tmp_dir,
                              const CheckpointState& state, const ParamTable& table, int writers,
                              const std::vector<std::string>& kinds,
                              const std::vector<std::vector<WrittenFile>>& files, int keep) {
  ODY_CHECK(kinds.size() == files.size(), "checkpoint: {} kinds named for {} sets of files", kinds.size(),
            files.size());
  const std::string final_dir = run_dir + "/" + checkpoint_step_name(state.step);
  nlohmann::json manifest = {{"format", "odyssey-checkpoint"},
                             {"format_version", 2},  // 3 once a slice is a box (below)
                             {"model", model_config_to_json(state.model)},
                             {"step", state.step},
                             {"next_row", state.next_row},
                             {"seed", state.seed},
                             // Every random stream (init, data shuffle) derives from the seed and the
                             // step, so the seed is the whole RNG state.
                             {"rng", {{"seed", state.seed}, {"streams", "derived from seed and step"}}},
                             {"schedule", state.schedule},
                             {"layout", state.layout},
                             {"run", state.run},
                             {"kinds", nlohmann::json::array()},
                             {"tensors", nlohmann::json::array()},
                             {"files", nlohmann::json::object()}};
  for (const ParamInfo& p : table.tensors())
    manifest["tensors"].push_back({{"name", p.name}, {"shape", p.shape}});
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string& kind = kinds[k];
    manifest["kinds"].push_back(kind);
    for (int r = 0; r < writers; ++r) {
      const std::string name = slice_file_name(kind, r);
      const WrittenFile& w = files[k][size_t(r)];
      // The slice index comes from the header the writer produced (cheap: nothing else is mapped in).
      SafetensorsFile f(tmp_dir + "/" + name);
      ODY_CHECK(uint64_t(fs::file_size(f.path())) == w.bytes, "{}: size differs from what rank {} wrote",
                f.path(), r);
      uint64_t data_bytes = 0;
      for (const auto& t : f.tensors()) data_bytes += t.bytes;
      const uint64_t data_start = w.bytes - data_bytes;
      nlohmann::json slices = nlohmann::json::array();
      for (const auto& t : f.tensors()) {
        nlohmann::json m = nlohmann::json::parse(f.metadata().at(t.name));
        nlohmann::json slice = {{"tensor", m.at("tensor")},
                                {"entry", t.name},
                                {"begin", m.at("begin")},
                                {"end", m.at("end")},
                                {"offset", data_start + uint64_t(t.data - f.tensors().front().data)},
                                {"xxh3_64", m.at("xxh3_64")}};
        if (m.contains("box")) {
          slice["box"] = m.at("box");
          manifest["format_version"] = 3;  // boxes: a format-2 reader must refuse it
        }
        slices.push_back(slice);
      }
      manifest["files"][name] = {
          {"kind", kind}, {"rank", r}, {"bytes", w.bytes}, {"xxh3_64", hex(w.xxh3)}, {"slices", slices}};
    }
  }
  manifest[kManifestChecksumKey] = manifest_checksum(manifest);
  write_text_atomic(tmp_dir + "/manifest.json", manifest.dump(1) + "\n");
  fsync_dir(tmp_dir);

  // Replace an existing checkpoint of the same step (resuming a finished run re-saves its last step)
  // only once the new one is complete, and never leave a moment without a complete step_N where
  // resume looks: swap the two directories in one atomic rename (RENAME_EXCHANGE), then delete the
  // old copy, now under the temporary name. A file system without the exchange (NFS) gets two renames
  // with the old copy parked as .step_N.old, which find_latest_checkpoint uses if a crash falls
  // between them.
  if (fs::exists(final_dir)) {
    if (renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_dir(run_dir);
      fs::remove_all(tmp_dir);
    } else {
      const std::string old_dir = run_dir + "/." + checkpoint_step_name(state.step) + ".old";
      fs::remove_all(old_dir);
      fs::rename(final_dir, old_dir);
      fsync_dir(run_dir);
      fs::rename(tmp_dir, final_dir);
      fsync_dir(run_dir);
      fs::remove_all(old_dir);
    }
  } else {
    fs::rename(tmp_dir, final_dir);
  }
  fsync_dir(run_dir);

  // Retention counts complete checkpoints only. A checkpoint is first renamed to a hidden name, so a
  // kill during the deletion never leaves a step_* directory with a manifest but missing files.
  // Leftovers of interrupted saves and deletions are dead (one run writes a run directory).
  std::vector<fs::path> entries;  // listed first: the loop below deletes
  for (const auto& e : fs::directory_iterator(run_dir))
    if (e.is_directory()) entries.push_back(e.path());
  std::vector<std::string> steps;
  for (const fs::path& path : entries) {
    const std::string name = path.filename().string();
    if (name.rfind("step_", 0) == 0 && fs::exists(path / "manifest.json")) steps.push_back(name);
    const bool hidden = name.rfind(".step_", 0) == 0 && name.size() > 14;
    const std::string suffix = hidden ? name.substr(14) : "";
    // A parked .old copy is dead once its step_N is back in place (it is the only copy otherwise).
    const bool dead_old =
        suffix == ".old" && fs::exists(fs::path(run_dir) / name.substr(1, 13) / "manifest.json");
    if (hidden && (suffix == ".del" || dead_old ||
                   (suffix == ".tmp" && name.substr(1, 13) < checkpoint_step_name(state.step))))
      fs::remove_all(path);
  }
  std::sort(steps.begin(), steps.end());
  if (keep > 0) {
    for (size_t i = 0; i + size_t(keep) < steps.size(); ++i) {
      const std::string doomed = run_dir + "/." + steps[i] + ".del";
      fs::remove_all(doomed);
      fs::rename(run_dir + "/" + steps[i], doomed);
      fsync_dir(run_dir);
      fs::remove_all(doomed);
    }
  }
  return final_dir;
}

void check_sliced_manifest(const std::string& dir, const CheckpointState& state, const ParamTable* table,
                           bool part) {
  const nlohmann::json& man = state.manifest;
  const std::string path = dir + "/manifest.json";
  try {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& t : man.at("tensors")) shapes[t.at("name")] = t.at("shape").get<std::vector<int64_t>>();
    if (table) {
      for (const ParamInfo& p : table->tensors()) {
        auto it = shapes.find(p.name);
        ODY_CHECK(it != shapes.end(), "{}: tensor {} is missing", path, p.name);
        ODY_CHECK(it->second == p.shape, "{}: tensor {} has shape {}, the model's is {}", path, p.name,
                  st_shape_string(it->second), st_shape_string(p.shape));
      }
      ODY_CHECK(part || shapes.size() == table->tensors().size(), "{}: {} tensors, the model has {}", path,
                shapes.size(), table->tensors().size());
    }
    // Every kind covers every tensor exactly once: its slices (boxes and ranges) tile the tensor. Checked
    // from the manifest alone, before any file is looked at.
    std::map<std::string, std::map<std::string, std::vector<BoxSlice>>> cover;
    for (auto& [name, info] : man.at("files").items()) {
      for (const auto& s : info.at("slices")) {
        const std::string tensor = s.at("tensor");
        auto it = shapes.find(tensor);
        ODY_CHECK(it != shapes.end(),
                  "{}: file {} holds a slice of tensor {}, which the manifest does not list", path, name,
                  tensor);
        cover[info.at("kind")][tensor].push_back(slice_of(s, it->second, path));
      }
    }
    for (const auto& kind : man.at("kinds")) {
      for (const auto& [name, shape] : shapes) {
        const std::string problem = tiling_problem(shape, cover[kind][name]);
        ODY_CHECK(problem.empty(), "{}: the {} slices of tensor {} do not cover it exactly once: {}", path,
                  kind.get<std::string>(), name, problem);
      }
    }
    for (auto& [name, info] : man.at("files").items()) check_file_size(dir, name, info);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed manifest: {}", path, e.what());
  }
}

void read_slices(const std::string& dir, const CheckpointState& state, const ParamTable& table,
                 const std::string& kind, const std::vector<DenseRange>& ranges, float* dense) {
  const nlohmann::json& files = state.manifest.at("files");
  bool listed = false;
  for (const auto& k : state.manifest.at("kinds")) listed |= k == kind;
  ODY_CHECK(listed, "{}: holds no '{}' state (a weights-only checkpoint?)", dir, kind);
  // Per tensor of the table, the slices of the global tensor the ranges ask for, placed in dense.
  struct Want {
    PlacedSlice slice;
    std::pair<int64_t, int64_t> hull;  // flat_hull: a cheap first test of which stored slices meet it
  };
  std::map<std::string, std::pair<const ParamInfo*, std::vector<Want>>> wanted;
  for (const ParamInfo& p : table.tensors()) {
    auto& [info, wants] = wanted[p.name];
    info = &p;
    for (const DenseRange& r : ranges) {
      const int64_t b = std::max(r.begin, p.offset), e = std::min(r.end, p.offset + p.numel);
      if (b >= e) continue;
      for (PlacedSlice want : held_slices(p, b - p.offset, e - p.offset)) {
        want.base += p.offset;
        wants.push_back({want, flat_hull(want.slice, p.shape)});
      }
    }
  }
  for (auto& [name, info] : files.items()) {
    if (info.at("kind") != kind) continue;
    std::unique_ptr<SafetensorsFile> file;  // opened only when one of its slices is needed
    for (const auto& s : info.at("slices")) {
      const std::string tensor = s.at("tensor");
      auto it = wanted.find(tensor);
      if (it == wanted.end()) continue;  // another pipeline stage's
      const auto& [p, wants] = it->second;
      const PlacedSlice stored = packed(slice_of(s, p->shape, dir + "/manifest.json"));
      const int64_t n = stored.slice.end - stored.slice.begin;
      const auto hull = flat_hull(stored.slice, p->shape);
      std::vector<const PlacedSlice*> meets;
      for (const Want& want : wants)
        if (std::max(hull.first, want.hull.first) < std::min(hull.second, want.hull.second) &&
            copy_common(stored, nullptr, want.slice, nullptr) > 0)
          meets.push_back(&want.slice);
      if (meets.empty()) continue;
      if (!file) {
        check_file_size(dir, name, info);
        file = std::make_unique<SafetensorsFile>(dir + "/" + name);
      }
      const SafetensorsFile::Tensor* t = file->try_get(s.at("entry").get<std::string>());
      ODY_CHECK(t != nullptr, "{}: tensor {} slice {} listed in the manifest is not in the file",
                file->path(), tensor, s.at("entry").get<std::string>());
      // The slice's place as the writer recorded it in the file: a manifest that places it elsewhere
      // (still tiling the tensor) would read elements into the wrong place.
      ODY_CHECK(
          header_agrees(*file, t->name, s),
          "{}: tensor {} slice {}: its box {} and range [{}, {}) in the manifest differ from the file's "
          "header (the manifest or the file is corrupt)",
          file->path(), tensor, t->name, box_string(stored.slice.box), stored.slice.begin, stored.slice.end);
      ODY_CHECK(t->dtype == StDtype::F32 && t->shape == std::vector<int64_t>{n},
                "{}: tensor {} slice has {} {}, the manifest says F32 [{}]", file->path(), tensor,
                st_dtype_name(t->dtype), st_shape_string(t->shape), n);
      ODY_CHECK(
          hex(XXH3_64bits(t->data, t->bytes)) == s.at("xxh3_64").get<std::string>(),
          "{}: tensor {} (elements [{}, {}) of its {} slice {}) fails its checksum: the file is corrupt",
          file->path(), tensor, stored.slice.begin, stored.slice.end, kind, box_string(stored.slice.box));
      for (const PlacedSlice* want : meets) copy_common(stored, t->data, *want, dense);
    }
  }
}

std::vector<std::string> verify_slice_file(const std::string& dir, const std::string& name,
                                           const nlohmann::json& info) {
  std::vector<std::string> problems;
  const std::string path = dir + "/" + name;
  try {
    check_file_size(dir, name, info);
    if (hex(file_xxh3(path)) != info.at("xxh3_64").get<std::string>())
      problems.push_back(fmt::format("{}: checksum mismatch (the file is corrupt)", path));
    SafetensorsFile file(path);
    for (const auto& s : info.at("slices")) {
      const std::string tensor = s.at("tensor");
      const SafetensorsFile::Tensor* t = file.try_get(s.at("entry").get<std::string>());
      if (!t) {
        problems.push_back(
            fmt::format("{}: tensor {} listed in the manifest is not in the file", path, tensor));
      } else if (hex(XXH3_64bits(t->data, t->bytes)) != s.at("xxh3_64").get<std::string>()) {
        problems.push_back(fmt::format("{}: tensor {} fails its checksum", path, tensor));
      }
    }
  } catch (const std::exception& e) {
    problems.push_back(e.what());
  }
  return problems;
}

}  // namespace odyssey
