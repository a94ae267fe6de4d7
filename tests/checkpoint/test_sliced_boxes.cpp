// Checkpoint slices as boxes (checkpoint/box.h): a checkpoint written by tensor-parallel ranks (each
// optionally ZeRO-sharded inside its tp rank) reads back element for element at any other tp and
// ZeRO layout and as a 1-D (non-tp) table, and the reverse; replicated tensors and replicated kv
// heads are stored once; a box set that overlaps, leaves a gap or disagrees with the file is refused
// naming the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "odyssey/checkpoint/box.h"
#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/checkpoint/sliced.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace fs = std::filesystem;
using namespace odyssey;

namespace {

// Odd sizes: GPT-2 with 6 heads, d_ff 48, vocab 11; Llama with 12 heads over 2 or 3 kv heads, d_ff
// 36, vocab 13. No vocabulary divides by the tp sizes used.
ModelConfig gpt2_odd() {
  ModelConfig c;
  c.n_layer = 2, c.n_head = 6, c.d_model = 12, c.seq_len = 5, c.vocab_size = 11;
  return c;
}

ModelConfig llama_gqa(int kv_heads) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.n_layer = 2, c.n_head = 12, c.n_kv_head = kv_heads, c.d_model = 24, c.d_ff = 36, c.seq_len = 5;
  c.vocab_size = 13;
  return c;
}

// Tensor parallelism over tp ranks, each rank's local buffer sharded `zero` ways inside the tp rank:
// shard z owns every zero-th block of 7 elements (so the shards cut every tensor and sub-parameter
// in many places, across tensor boundaries). tp 1: the 1-D layout.
struct Layout {
  int tp = 1, zero = 1;
};

constexpr std::array<const char*, 3> kKinds = {"params", "m", "v"};
constexpr float kUntouched = -7.0f;

// Distinct, exactly representable values per kind, tensor and global element.
float global_value(int kind, const ParamInfo& p, int64_t g) {
  return float((kind * 64 + p.index) * 10000 + g);
}

// Tp rank r's local buffer of one kind: every held element its global value; padding rows `fill`.
std::vector<float> local_buffer(const ParamTable& local, int kind, float fill) {
  std::vector<float> buf(size_t(local.total()), fill);
  for (const ParamInfo& p : local.tensors())
    p.for_each_run([&](int64_t l, int64_t g, int64_t n) {
      for (int64_t i = 0; i < n; ++i) buf[size_t(p.offset + l + i)] = global_value(kind, p, g + i);
    });
  return buf;
}

std::vector<DenseRange> zero_shard(int64_t total, int zero, int z) {
  if (zero == 1) return {{0, total}};
  std::vector<DenseRange> out;
  for (int64_t b = 7 * z; b < total; b += 7 * zero) out.push_back({b, std::min(b + 7, total)});
  return out;
}

// mask[i]: element i lies in one of the ranges.
std::vector<char> mask_of(const std::vector<DenseRange>& ranges, int64_t total) {
  std::vector<char> mask(size_t(total), 0);
  for (const DenseRange& r : ranges) std::fill(mask.begin() + r.begin, mask.begin() + r.end, 1);
  return mask;
}

bool valid_tp(const ParamTable& model, int tp) {
  try {
    model.tensor_parallel(tp, 0);
    return true;
  } catch (const Error&) {
    return false;
  }
}

class SlicedBoxes : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    run_ =
        (fs::temp_directory_path() / ("ody_boxes_" + std::to_string(getpid()) + "_" + info->name())).string();
    fs::remove_all(run_);
  }
  void TearDown() override { fs::remove_all(run_); }

  // Every tp rank and ZeRO shard of `at` writes its files (writer r * zero + z); rank 0 commits.
  std::string write(const ModelConfig& config, Layout at, int64_t step) {
    const ParamTable model(config);
    const std::string tmp = checkpoint_tmp_dir(run_, step);
    fs::create_directories(tmp);
    std::vector<std::vector<WrittenFile>> files(kKinds.size());
    for (int r = 0; r < at.tp; ++r) {
      const ParamTable local = model.tensor_parallel(at.tp, r);
      for (size_t k = 0; k < kKinds.size(); ++k) {
        for (int z = 0; z < at.zero; ++z) {
          // Only the shard's own elements are real: a writer reading outside its pieces stores poison.
          std::vector<DenseRange> pieces = zero_shard(local.total(), at.zero, z);
          std::vector<float> buf = local_buffer(local, int(k), 0.0f);
          const std::vector<char> mine = mask_of(pieces, local.total());
          for (int64_t i = 0; i < local.total(); ++i)
            if (!mine[size_t(i)]) buf[size_t(i)] = -999.0f;
          for (DenseRange& piece : pieces) piece.data = buf.data() + piece.begin;
          files[k].push_back(
              write_slice_file(tmp, kKinds[k], r * at.zero + z, local, pieces, TpPiece{at.tp, r}));
        }
      }
    }
    CheckpointState state;
    state.model = config;
    state.step = step;
    state.layout = {{"tp", at.tp}, {"zero_shards", at.zero}};
    return commit_checkpoint(run_, tmp, state, model, at.tp * at.zero, {kKinds.begin(), kKinds.end()}, files,
                             0);
  }

  // Every tp rank and ZeRO shard of `at` reads exactly its own range; compared element for element.
  void read_back(const std::string& dir, const ModelConfig& config, Layout at) {
    const ParamTable model(config);
    const CheckpointState state = read_checkpoint_manifest(dir);
    for (int r = 0; r < at.tp; ++r) {
      const ParamTable local = model.tensor_parallel(at.tp, r);
      check_sliced_manifest(dir, state, &local);
      for (size_t k = 0; k < kKinds.size(); ++k) {
        const std::vector<float> want = local_buffer(local, int(k), kUntouched);  // padding not written
        for (int z = 0; z < at.zero; ++z) {
          const std::vector<DenseRange> ranges = zero_shard(local.total(), at.zero, z);
          const std::vector<char> mine = mask_of(ranges, local.total());
          std::vector<float> got(size_t(local.total()), kUntouched);
          read_slices(dir, state, local, kKinds[k], ranges, got.data());
          for (int64_t i = 0; i < local.total(); ++i)
            ASSERT_EQ(got[size_t(i)], mine[size_t(i)] ? want[size_t(i)] : kUntouched)
                << dir << " read at tp " << at.tp << " rank " << r << " zero shard " << z << " of " << at.zero
                << " kind " << kKinds[k] << " element " << i;
        }
      }
    }
  }

  // Written at each of `writers`, read at every valid tp 1..6 with and without a ZeRO split.
  void round_trips(const ModelConfig& config, const std::vector<Layout>& writers) {
    const ParamTable model(config);
    for (Layout w : writers) {
      SCOPED_TRACE("written at tp " + std::to_string(w.tp) + " zero " + std::to_string(w.zero));
      ASSERT_TRUE(valid_tp(model, w.tp));
      const std::string dir = write(config, w, ++step_);
      const CheckpointState state = read_checkpoint_manifest(dir);
      EXPECT_EQ(state.format_version, w.tp > 1 ? 3 : 2);  // boxes only where a tensor is cut
      // Each global element is stored exactly once per kind.
      int64_t stored = 0;
      for (auto& [name, info] : state.manifest.at("files").items())
        if (info.at("kind") == "params")
          for (const auto& s : info.at("slices"))
            stored += s.at("end").get<int64_t>() - s.at("begin").get<int64_t>();
      EXPECT_EQ(stored, model.total());
      for (int tp = 1; tp <= 6; ++tp)
        if (valid_tp(model, tp))
          for (int zero : {1, 3}) read_back(dir, config, {tp, zero});
    }
  }

  std::string run_;
  int64_t step_ = 0;
};

}  // namespace

TEST_F(SlicedBoxes, Gpt2AnyTpAnyZero) {
  // tp 2 (with and without ZeRO inside), tp 3, tp 6 (one head per rank) and the 1-D layout.
  round_trips(gpt2_odd(), {{2, 1}, {2, 3}, {3, 2}, {6, 1}, {1, 4}});
}

TEST_F(SlicedBoxes, LlamaTwoKvHeadsAnyTpAnyZero) {
  // tp 4 and 6 replicate each kv head on 2 and 3 ranks: written once all the same.
  round_trips(llama_gqa(2), {{2, 1}, {2, 3}, {4, 2}, {6, 1}, {1, 4}});
}

TEST_F(SlicedBoxes, LlamaThreeKvHeadsAnyTpAnyZero) {
  ModelConfig tied = llama_gqa(3);
  tied.tie_embeddings = true;
  round_trips(llama_gqa(3), {{3, 1}, {6, 2}, {1, 3}});
  round_trips(tied, {{3, 2}});
}

// The whole-tensor loaders (load_checkpoint) read a checkpoint written at tp.
TEST_F(SlicedBoxes, TpCheckpointLoadsWhole) {
  const ModelConfig c = llama_gqa(2);
  const std::string dir = write(c, {4, 3}, 7);
  const ParamTable model(c);
  std::vector<float> p(size_t(model.total())), m(p.size()), v(p.size());
  load_checkpoint(dir, model, p.data(), m.data(), v.data());
  EXPECT_EQ(v, local_buffer(model, 2, 0.0f));
  EXPECT_EQ(p, local_buffer(model, 0, 0.0f));
}

// The slices of one tensor (at tp 2, 1 ZeRO shard): c_attn is q, k and v rows per rank.
TEST_F(SlicedBoxes, SubParametersAreSeparateBoxes) {
  const ModelConfig c = gpt2_odd();
  const std::string dir = write(c, {2, 1}, 1);
  const CheckpointState state = read_checkpoint_manifest(dir);
  std::set<std::string> boxes;
  for (auto& [name, info] : state.manifest.at("files").items())
    if (info.at("kind") == "params")
      for (const auto& s : info.at("slices"))
        if (s.at("tensor") == "h.0.attn.c_attn.weight") boxes.insert(s.at("box").dump());
  // [3C, C] = [36, 12]: rank 0 holds rows 0:6, 12:18, 24:30; rank 1 the other halves.
  EXPECT_EQ(boxes, (std::set<std::string>{"[[0,6],[0,12]]", "[[6,12],[0,12]]", "[[12,18],[0,12]]",
                                          "[[18,24],[0,12]]", "[[24,30],[0,12]]", "[[30,36],[0,12]]"}));
}

namespace {

// Rewrites the manifest through edit (the checksum made consistent again) and expects reading it to
// fail with a message containing every one of `says`.
void expect_refused(const std::string& dir, const std::function<void(nlohmann::json&)>& edit,
                    const std::vector<std::string>& says, const ParamTable* read_with = nullptr) {
  auto manifest = nlohmann::json::parse(read_text_file(dir + "/manifest.json"));
  edit(manifest);
  manifest.erase(kManifestChecksumKey);
  manifest[kManifestChecksumKey] = manifest_checksum(manifest);
  write_text_atomic(dir + "/manifest.json", manifest.dump());
  try {
    const CheckpointState state = read_checkpoint_manifest(dir);
    ASSERT_NE(read_with, nullptr) << "accepted the manifest";
    read_slices(dir, state, *read_with, "params", {{0, read_with->total()}},
                std::vector<float>(size_t(read_with->total())).data());
    FAIL() << "read a damaged checkpoint";
  } catch (const Error& e) {
    for (const std::string& s : says) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

// The first params slice of `tensor` in any file: (file name, index in its slices).
std::pair<std::string, size_t> find_slice(const nlohmann::json& manifest, const std::string& tensor) {
  for (auto& [name, info] : manifest.at("files").items())
    if (info.at("kind") == "params")
      for (size_t i = 0; i < info.at("slices").size(); ++i)
        if (info.at("slices")[i].at("tensor") == tensor) return {name, i};
  ADD_FAILURE() << "no slice of " << tensor;
  return {};
}

}  // namespace

TEST_F(SlicedBoxes, OverlappingBoxesAreRefused) {
  const std::string dir = write(gpt2_odd(), {2, 1}, 1);
  const std::string t = "h.1.mlp.c_proj.weight";  // [C, 4C], split by columns
  expect_refused(dir,
                 [&](nlohmann::json& m) {
                   auto [file, i] = find_slice(m, t);
                   nlohmann::json& s = m["files"][file]["slices"][i];
                   s["box"][1][1] =
                       s["box"][1][1].get<int64_t>() + 1;  // one column into the other rank's box
                   s["end"] = s["end"].get<int64_t>() + 1;
                 },
                 {"the params slices of tensor " + t, "overlap"});
}

TEST_F(SlicedBoxes, IncompleteBoxesAreRefused) {
  const std::string dir = write(llama_gqa(2), {4, 1}, 1);
  const std::string t = "model.layers.0.self_attn.k_proj.weight";  // one kv head per two ranks
  expect_refused(dir,
                 [&](nlohmann::json& m) {
                   auto [file, i] = find_slice(m, t);
                   m["files"][file]["slices"].erase(i);
                 },
                 {"the params slices of tensor " + t, "cover 48 of its 96 elements"});
}

TEST_F(SlicedBoxes, BoxOutsideTheTensorIsRefused) {
  const std::string dir = write(gpt2_odd(), {2, 1}, 1);
  const std::string t = "wte";  // [11, 12], vocab rows: rank 1 holds rows 6:11 (row 11 is padding)
  expect_refused(dir,
                 [&](nlohmann::json& m) {
                   for (auto& [file, info] : m["files"].items())
                     for (auto& s : info["slices"])
                       if (s["tensor"] == t && s["box"][0][0] == 6) s["box"][0][1] = 12;
                 },
                 {"the params slices of tensor " + t, "outside the tensor"});
}

// A box in the manifest that disagrees with the file's header (both consistent on their own, and
// still tiling the tensor: two ranks' boxes swapped) is refused when the slice is read.
TEST_F(SlicedBoxes, BoxDisagreeingWithTheFileIsRefused) {
  const ModelConfig c = gpt2_odd();
  const std::string dir = write(c, {2, 1}, 1);
  const std::string t = "h.0.attn.c_proj.weight";  // [C, C] split by columns: 0:6 and 6:12
  const ParamTable model(c);
  expect_refused(
      dir,
      [&](nlohmann::json& m) {
        for (auto& [file, info] : m["files"].items())
          for (auto& s : info["slices"])
            if (s["tensor"] == t)
              s["box"][1] = s["box"][1][0] == 0 ? nlohmann::json{6, 12} : nlohmann::json{0, 6};
      },
      {t, "differ from the file's header"}, &model);
}

TEST_F(SlicedBoxes, CorruptBoxDataIsNamed) {
  const ModelConfig c = gpt2_odd();
  const std::string dir = write(c, {2, 1}, 1);
  // Flip a byte inside rank 1's first c_fc.weight slice.
  const std::string file = dir + "/" + slice_file_name("params", 1);
  const auto manifest = read_checkpoint_manifest(dir).manifest;
  uint64_t at = 0;
  for (const auto& s : manifest.at("files").at(slice_file_name("params", 1)).at("slices"))
    if (s.at("tensor") == "h.0.mlp.c_fc.weight") at = s.at("offset").get<uint64_t>() + 5;
  ASSERT_GT(at, 0u);
  std::string bytes = read_text_file(file);
  bytes[at] = char(bytes[at] ^ 0x40);
  write_text_atomic(file, bytes);
  const ParamTable local = ParamTable(c).tensor_parallel(2, 1);
  std::vector<float> out(size_t(local.total()));
  const CheckpointState state = read_checkpoint_manifest(dir);
  try {
    read_slices(dir, state, local, "params", {{0, local.total()}}, out.data());
    FAIL() << "read a corrupt slice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.mlp.c_fc.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fails its checksum"), std::string::npos) << e.what();
  }
}

// A writer passing the wrong tp place is refused naming a tensor, before anything is written.
TEST_F(SlicedBoxes, WrongTpPieceIsRefused) {
  const ParamTable local = ParamTable(gpt2_odd()).tensor_parallel(2, 0);
  const std::string tmp = checkpoint_tmp_dir(run_, 1);
  fs::create_directories(tmp);
  std::vector<float> buf(size_t(local.total()));
  try {
    write_slice_file(tmp, "params", 1, local, {{0, local.total(), buf.data()}}, TpPiece{2, 1});
    FAIL() << "wrote rank 0's shards as rank 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not what tensor parallel rank 1 of 2 holds"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp + "/" + slice_file_name("params", 1)));
}
