// The universal checkpoint format on its own: slices written by any number of writers, each owning
// scattered ranges, read back for any ranges, and refused when the slices do not tile the tensors.
#include "odyssey/checkpoint/sliced.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "odyssey/checkpoint/safetensors.h"
#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace fs = std::filesystem;
using namespace odyssey;

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.d_model = 8;
  c.seq_len = 5;
  c.vocab_size = 11;
  return c;
}

// Distinct values per kind and element, so any misplaced element shows.
float value(int kind, int64_t i) {
  return float(kind * 100000 + i) * 0.5f;
}

class SlicedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    run_ = (fs::temp_directory_path() / ("ody_sliced_" + std::to_string(getpid()) + "_" + info->name()))
               .string();
    fs::remove_all(run_);
  }
  void TearDown() override { fs::remove_all(run_); }

  static constexpr std::array<const char*, 3> kKinds = {"params", "m", "v"};

  // Writer w of W owns every W-th block of 7 elements (scattered ranges, cutting across tensors).
  std::string write(int writers, int64_t step) {
    const int64_t total = table_.total();
    std::vector<std::vector<float>> data(3, std::vector<float>(size_t(total)));
    for (int k = 0; k < 3; ++k)
      for (int64_t i = 0; i < total; ++i) data[size_t(k)][size_t(i)] = value(k, i);
    const std::string tmp = checkpoint_tmp_dir(run_, step);
    fs::create_directories(tmp);
    std::vector<std::vector<WrittenFile>> files(3);
    for (int k = 0; k < 3; ++k) {
      for (int w = 0; w < writers; ++w) {
        std::vector<DenseRange> pieces;
        for (int64_t b = 7 * w; b < total; b += 7 * writers)
          pieces.push_back({b, std::min(b + 7, total), data[size_t(k)].data() + b});
        files[size_t(k)].push_back(write_slice_file(tmp, kKinds[size_t(k)], w, table_, pieces));
      }
    }
    CheckpointState state;
    state.model = tiny();
    state.step = step;
    state.layout = {{"world_size", writers}};
    return commit_checkpoint(run_, tmp, state, table_, writers, {kKinds.begin(), kKinds.end()}, files, 2);
  }

  std::string run_;
  ParamTable table_{tiny()};
};

TEST_F(SlicedTest, AnyWritersAnyRanges) {
  for (int writers : {1, 3, 4}) {
    const std::string dir = write(writers, writers);
    CheckpointState state = read_checkpoint_manifest(dir);
    EXPECT_EQ(state.format_version, 2);
    EXPECT_EQ(state.layout["world_size"], writers);
    const int64_t total = table_.total();
    for (int k = 0; k < 3; ++k) {
      std::vector<float> out(size_t(total), -1.0f);
      const std::vector<DenseRange> ranges = {{3, 29}, {total - 5, total}};
      read_slices(dir, state, table_, kKinds[size_t(k)], ranges, out.data());
      for (int64_t i = 0; i < total; ++i) {
        const bool wanted = (i >= 3 && i < 29) || i >= total - 5;
        EXPECT_EQ(out[size_t(i)], wanted ? value(k, i) : -1.0f)
            << "writers " << writers << " kind " << k << " i " << i;
      }
    }
    const size_t n = static_cast<size_t>(total);
    std::vector<float> p(n), m(n), v(n);
    load_checkpoint(dir, table_, p.data(), m.data(), v.data());
    for (int64_t i = 0; i < total; ++i) ASSERT_EQ(v[size_t(i)], value(2, i));
  }
  // keep = 2: the oldest of the three is gone.
  EXPECT_FALSE(fs::exists(run_ + "/step_00000001"));
  EXPECT_EQ(find_latest_checkpoint(run_), run_ + "/step_00000004");
}

TEST_F(SlicedTest, GapInTheSlicesIsRefused) {
  const std::string dir = write(2, 1);
  // Drop writer 1's params file from the manifest: writer 0's slices alone leave gaps.
  auto manifest = nlohmann::json::parse(read_text_file(dir + "/manifest.json"));
  manifest["files"].erase(slice_file_name("params", 1));
  manifest.erase(kManifestChecksumKey);
  manifest[kManifestChecksumKey] = manifest_checksum(manifest);  // consistent, only gappy
  write_text_atomic(dir + "/manifest.json", manifest.dump());
  try {
    read_checkpoint_manifest(dir);
    FAIL() << "accepted a checkpoint with gaps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the params slices of tensor "), std::string::npos) << e.what();
  }
}

// A flipped bit in manifest.json (bit i mod 8 of every 5th byte i: each field, a fifth of the cost
// under ASan) never loads a different manifest: it is refused naming the manifest, also where the
// result is still valid JSON (a digit of the step or the seed), unless the content stays the same
// (1e-06 read as 1E-06, or the checksum key's own name, which makes a manifest read as written before
// the checksum existed).
TEST_F(SlicedTest, FlippedBitInTheManifestIsRefused) {
  const size_t n = size_t(table_.total());
  std::vector<float> p(n, 1.0f), m(n, 2.0f), v(n, 3.0f);
  CheckpointState state;
  state.model = tiny();
  state.step = 3;
  state.next_row = 12;
  state.seed = 1;
  const std::string dir = save_checkpoint(run_, state, table_, p.data(), m.data(), v.data());
  const std::string path = dir + "/manifest.json";
  const std::string good = read_text_file(path);
  nlohmann::json want = nlohmann::json::parse(good);
  want.erase(kManifestChecksumKey);
  int refused = 0, parsed_but_refused = 0;
  for (size_t i = 0; i < good.size(); i += 5) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ (1 << (i % 8)));
    const bool valid_json = nlohmann::json::accept(bad);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;  // no fsync: one write a byte
    try {
      nlohmann::json got = read_checkpoint_manifest(dir).manifest;
      for (auto it = got.begin(); it != got.end(); ++it)  // the checksum key, under any spelling
        if (it.key() != kManifestChecksumKey && !want.contains(it.key())) {
          got.erase(it);
          break;
        }
      got.erase(kManifestChecksumKey);
      ASSERT_EQ(got, want) << "byte " << i << " accepted: " << good.substr(i > 40 ? i - 40 : 0, 60);
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      ++refused;
      parsed_but_refused += valid_json;
    }
  }
  EXPECT_GT(refused, int(good.size() / 5) - 10);
  EXPECT_GT(parsed_but_refused, 100) << "of " << good.size() << " bytes";  // only the checksum catches these
}

TEST_F(SlicedTest, IncompleteSaveIsNeverTheLatest) {
  write(1, 5);
  fs::create_directories(checkpoint_tmp_dir(run_, 9));  // a save killed before its manifest
  fs::create_directories(run_ + "/step_00000010");      // no manifest either
  EXPECT_EQ(find_latest_checkpoint(run_), run_ + "/step_00000005");
}

// Re-saving a step (resuming a finished run does) swaps the new checkpoint in atomically: afterwards
// step_N is the new one and no hidden copy of it is left.
TEST_F(SlicedTest, ResaveReplacesTheStep) {
  write(2, 5);
  write(3, 5);
  EXPECT_EQ(read_checkpoint_manifest(run_ + "/step_00000005").layout["world_size"], 3);
  for (const auto& e : fs::directory_iterator(run_))
    EXPECT_EQ(e.path().filename().string().rfind(".step_", 0), std::string::npos) << e.path();
}

// Where the exchange is not available, a crash between the fallback's two renames leaves the old
// copy parked as .step_N.old and no step_N: it is still found (and loads), and the next complete
// save of that step removes it.
TEST_F(SlicedTest, ParkedCopyOfAnInterruptedResaveIsFound) {
  write(1, 4);
  write(2, 5);
  fs::rename(run_ + "/step_00000005", run_ + "/.step_00000005.old");
  const std::string found = find_latest_checkpoint(run_);
  EXPECT_EQ(found, run_ + "/.step_00000005.old");
  EXPECT_EQ(read_checkpoint_manifest(found).layout["world_size"], 2);
  EXPECT_EQ(resolve_checkpoint(run_), found);
  write(3, 5);
  EXPECT_EQ(find_latest_checkpoint(run_), run_ + "/step_00000005");
  EXPECT_FALSE(fs::exists(run_ + "/.step_00000005.old"));
  // A parked copy whose step is back in place is not the latest and is removed by the next save.
  fs::create_directories(run_ + "/.step_00000006.old");
  write_text_atomic(run_ + "/.step_00000006.old/manifest.json", "{}");
  fs::create_directories(run_ + "/step_00000006");
  write_text_atomic(run_ + "/step_00000006/manifest.json", "{}");
  EXPECT_EQ(find_latest_checkpoint(run_), run_ + "/step_00000006");
}

// Format 1 (model.safetensors + optimizer.safetensors, whole-file checksums) is still read.
TEST_F(SlicedTest, ReadsFormatOne) {
  const std::string dir = run_ + "/step_00000003";
  fs::create_directories(dir);
  const size_t n = static_cast<size_t>(table_.total());
  std::vector<float> p(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i)
    p[i] = value(0, int64_t(i)), m[i] = value(1, int64_t(i)), v[i] = value(2, int64_t(i));
  std::vector<StTensorRef> model, opt;
  for (const ParamInfo& t : table_.tensors()) {
    model.push_back({t.name, StDtype::F32, t.shape, p.data() + t.offset});
    opt.push_back({"m." + t.name, StDtype::F32, t.shape, m.data() + t.offset});
  }
  for (const ParamInfo& t : table_.tensors())
    opt.push_back({"v." + t.name, StDtype::F32, t.shape, v.data() + t.offset});
  write_safetensors(dir + "/model.safetensors", model);
  write_safetensors(dir + "/optimizer.safetensors", opt);
  nlohmann::json files;
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    auto bytes = read_binary_file(dir + "/" + f);
    files[f] = {{"bytes", bytes.size()},
                {"xxh3_64", fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()))}};
  }
  nlohmann::json manifest = {{"format", "odyssey-checkpoint"},
                             {"format_version", 1},
                             {"model", model_config_to_json(tiny())},
                             {"step", 3},
                             {"next_row", 12},
                             {"seed", 1},
                             {"files", files}};
  write_text_atomic(dir + "/manifest.json", manifest.dump());
  std::vector<float> p2(n), m2(n), v2(n);
  CheckpointState state = load_checkpoint(dir, table_, p2.data(), m2.data(), v2.data());
  EXPECT_EQ(state.format_version, 1);
  EXPECT_EQ(state.step, 3);
  EXPECT_EQ(p2, p);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
}

}  // namespace
