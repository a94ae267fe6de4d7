// The disk tier's scratch file (core/offload_file.h): records come back bit for bit, in any order and
// overlapping with other requests; the file is preallocated and invisible in its directory; a corrupt
// record, a directory that cannot hold the file, and a read of a record never written are errors that
// name the key, the file and the record.
#include "odyssey/core/offload_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../dataio/data_test_util.h"

namespace odyssey {
namespace {

using testing_data::expect_error;
using testing_data::TempDir;

std::vector<float> pattern(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = float(int((i * 2654435761u + unsigned(seed)) % 100003)) * 0.37f - 1.5f;
  return v;
}

bool empty_dir(const std::string& dir) {
  return std::filesystem::directory_iterator(dir) == std::filesystem::directory_iterator();
}

TEST(OffloadFile, RecordsComeBackBitwiseAndTheFileIsUnlinked) {
  TempDir dir;
  const size_t n = 5000;  // 20000 bytes: not a multiple of the 4096-byte record alignment
  {
    OffloadFile f(dir.path, 3, n * sizeof(float), "memory.offload_dir", "the input of layer", 1);
    EXPECT_EQ(f.file_bytes(), 3u * 20480u);
    EXPECT_EQ(OffloadFile::bytes_for(3, n * sizeof(float)), f.file_bytes());
    EXPECT_TRUE(empty_dir(dir.path)) << "the scratch file is unlinked at once";
    std::vector<std::vector<float>> in = {pattern(n, 1), pattern(n, 2), pattern(n, 3)};
    uint64_t t = 0;
    for (int r = 0; r < 3; ++r) t = f.write(r, in[size_t(r)].data());
    std::vector<float> out(n, 0.0f);
    for (int r : {2, 0, 1}) {  // a read queued behind the writes
      f.wait(f.read(r, out.data()));
      EXPECT_EQ(out, in[size_t(r)]) << "record " << r;
    }
    EXPECT_GE(t, 3u);
    // Rewriting a record replaces it.
    const std::vector<float> again = pattern(n, 9);
    f.write(1, again.data());
    f.wait(f.read(1, out.data()));
    EXPECT_EQ(out, again);
    EXPECT_EQ(f.bytes_written(), 4 * n * sizeof(float));
    EXPECT_EQ(f.bytes_read(), 4 * n * sizeof(float));
  }
  EXPECT_TRUE(empty_dir(dir.path));
}

// Records of different lengths (a layer input's row chunks, the last one short) lie at 4096-aligned
// offsets, each padded; each comes back bitwise, the neighbours untouched, and is named by the caller.
TEST(OffloadFile, RecordsOfDifferentLengthsAreAlignedAndNamed) {
  TempDir dir;
  const std::vector<size_t> floats = {5000, 1024, 25, 3000};
  std::vector<size_t> bytes;
  for (size_t n : floats) bytes.push_back(n * sizeof(float));
  OffloadFile f(dir.path, bytes, "memory.offload_dir",
                [](int r) { return "the input of layer 2, chunk " + std::to_string(r); });
  EXPECT_EQ(f.records(), 4);
  EXPECT_EQ(f.file_bytes(), 20480u + 4096u + 4096u + 12288u);
  EXPECT_EQ(OffloadFile::bytes_for(bytes), f.file_bytes());
  std::vector<std::vector<float>> in;
  for (size_t r = 0; r < floats.size(); ++r) in.push_back(pattern(floats[r], int(r) + 20));
  for (int r : {3, 1, 0, 2}) f.write(r, in[size_t(r)].data());
  for (int r : {0, 2, 1, 3}) {
    std::vector<float> out(floats[size_t(r)], 0.0f);
    f.wait(f.read(r, out.data()));
    EXPECT_EQ(out, in[size_t(r)]) << "record " << r;
    EXPECT_EQ(f.record_bytes(r), bytes[size_t(r)]);
  }
  EXPECT_EQ(f.bytes_read(), (5000u + 1024u + 25u + 3000u) * sizeof(float));
  f.corrupt_for_test(2, 99);
  std::vector<float> out(25);
  expect_error([&] { f.wait(f.read(2, out.data())); }, {"the input of layer 2, chunk 2", "corrupt", "xxh3"});
}

TEST(OffloadFile, CorruptRecordIsANamedError) {
  TempDir dir;
  const size_t n = 1000;
  OffloadFile f(dir.path, 2, n * sizeof(float), "memory.offload_dir", "the input of layer", 4);
  const std::vector<float> a = pattern(n, 5);
  f.write(1, a.data());
  f.corrupt_for_test(1, 123);
  std::vector<float> out(n);
  expect_error([&] { f.wait(f.read(1, out.data())); },
               {"the input of layer 5", "corrupt", "xxh3", f.path(), "memory.offload_dir"});
  // Once failed, every later wait reports it (no request runs on a broken store).
  expect_error([&] { f.wait(f.read(1, out.data())); }, {"the input of layer 5"});
}

TEST(OffloadFile, ReadOfAnUnwrittenRecordIsANamedError) {
  TempDir dir;
  OffloadFile f(dir.path, 2, 64, "memory.offload_dir", "the input of layer", 0);
  std::vector<float> out(16);
  expect_error([&] { f.wait(f.read(0, out.data())); }, {"the input of layer 0", "never written"});
}

TEST(OffloadFile, DirectoryThatCannotHoldTheFileIsRefused) {
  TempDir dir;
  // Not a directory (a regular file is in the way), and a directory that does not exist.
  testing_data::TempDir other;
  const std::string file = other.file("plain");
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fclose(f);
  }
  expect_error([&] { OffloadFile f(file, 1, 64, "memory.offload_dir", "the input of layer"); },
               {"memory.offload_dir", "cannot create a scratch file", file});
  expect_error([&] { OffloadFile f(dir.file("missing"), 1, 64, "memory.offload_dir", "the input of layer"); },
               {"memory.offload_dir", "missing"});
  // More than any disk holds (16 EiB / 4): preallocation fails at once, and nothing is left behind.
  expect_error(
      [&] { OffloadFile f(dir.path, 1 << 20, size_t{1} << 42, "memory.offload_dir", "the input of layer"); },
      {"memory.offload_dir", "cannot reserve", "memory.disk_budget_gb"});
  EXPECT_TRUE(empty_dir(dir.path));
}

}  // namespace
}  // namespace odyssey
