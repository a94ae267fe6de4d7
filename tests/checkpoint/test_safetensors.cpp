#include "odyssey/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

#include "checkpoint_test_util.h"

namespace fs = std::filesystem;
using odyssey::SafetensorsFile;
using odyssey::StDtype;
using odyssey::StTensorRef;
using odyssey::testing_checkpoint::error_of;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ody_st_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file from a raw header and data section; header_len overrides the length field.
  std::string raw(const std::string& header, size_t data_bytes, int64_t header_len = -1) {
    std::vector<uint8_t> bytes(8);
    const uint64_t n = header_len < 0 ? header.size() : uint64_t(header_len);
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(n >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + data_bytes, 0x5a);
    std::string p = path("raw.safetensors");
    odyssey::write_file_atomic(p, bytes.data(), bytes.size());
    return p;
  }

  fs::path dir_;
};

// Expects opening the file to fail with a message containing the path and every needle.
void expect_open_error(const std::string& p, std::vector<std::string> needles) {
  std::string msg = error_of([&] { SafetensorsFile f(p); });
  needles.push_back(p);
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

}  // namespace

TEST_F(SafetensorsTest, RoundTrip) {
  std::vector<float> a(15);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * float(i) - 1.0f;
  std::vector<int32_t> b = {-7, 0, 1, 2147483647, -2147483647 - 1, 42, 3};
  std::vector<uint16_t> c = {0, 1, 65535, 50256, 7, 9};
  double d = 3.141592653589793;
  const std::vector<StTensorRef> in = {
      {"a.weight", StDtype::F32, {3, 5}, a.data()}, {"tokens", StDtype::I32, {7}, b.data()},
      {"u16", StDtype::U16, {2, 3}, c.data()},      {"scalar", StDtype::F64, {}, &d},
      {"empty", StDtype::F32, {0, 4}, nullptr},
  };
  const std::string p = path("x.safetensors");
  odyssey::write_safetensors(p, in, {{"format", "pt"}, {"note", "odd \"quoted\" text"}});
  // Nothing but the file itself: the temporary was renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);

  SafetensorsFile f(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "odd \"quoted\" text");
  ASSERT_EQ(f.tensors().size(), 5u);
  // In data order, which is the order written.
  EXPECT_EQ(f.tensors()[0].name, "a.weight");
  EXPECT_EQ(f.tensors()[2].name, "u16");

  const auto& ta = f.get("a.weight");
  EXPECT_EQ(ta.dtype, StDtype::F32);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(ta.numel, 15);
  EXPECT_EQ(ta.bytes, 60u);
  EXPECT_EQ(std::memcmp(ta.data, a.data(), 60), 0);
  EXPECT_EQ(f.read_f32("a.weight"), a);
  EXPECT_EQ(f.read_i32("tokens"), b);
  std::vector<int32_t> c32(c.begin(), c.end());
  EXPECT_EQ(f.read_i32("u16"), c32);
  EXPECT_EQ(f.get("u16").dtype, StDtype::U16);
  EXPECT_EQ(f.get("scalar").shape.size(), 0u);
  EXPECT_EQ(f.get("scalar").numel, 1);
  EXPECT_EQ(f.read_f32("scalar"), std::vector<float>{float(d)});
  EXPECT_EQ(f.get("empty").numel, 0);
  EXPECT_EQ(f.get("empty").bytes, 0u);
  EXPECT_TRUE(f.contains("tokens"));
  EXPECT_FALSE(f.contains("nope"));

  // The header is padded so the data section is 8-byte aligned.
  auto bytes = odyssey::read_binary_file(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[size_t(i)]) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);

  // Moving keeps the mapping valid.
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(g.read_f32("a.weight"), a);

  // Overwriting replaces the file.
  odyssey::write_safetensors(p, {{"only", StDtype::I32, {1}, b.data()}});
  SafetensorsFile h(p);
  EXPECT_EQ(h.tensors().size(), 1u);
  EXPECT_TRUE(h.metadata().empty());
}

TEST_F(SafetensorsTest, HalfAndBfloat16ConvertToFloat) {
  const std::vector<uint16_t> half = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8400, 0x3555, 0x7C00, 0x0000};
  const std::vector<float> half_expect = {
      1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f, -6.103515625e-05f, 0.333251953125f, INFINITY, 0.0f};
  const std::vector<uint16_t> bf = {0x3F80, 0xC040, 0x4049, 0xFF80};
  const std::vector<float> bf_expect = {1.0f, -3.0f, 3.140625f, -INFINITY};
  const std::string p = path("h.safetensors");
  odyssey::write_safetensors(
      p, {{"h", StDtype::F16, {2, 4}, half.data()}, {"b", StDtype::BF16, {4}, bf.data()}});
  SafetensorsFile f(p);
  EXPECT_EQ(f.read_f32("h"), half_expect);
  EXPECT_EQ(f.read_f32("b"), bf_expect);
  std::vector<float> out(8);
  f.read_f32("h", {2, 4}, out.data());
  EXPECT_EQ(out, half_expect);
}

TEST_F(SafetensorsTest, AccessErrorsNameFileAndTensor) {
  std::vector<float> a(6, 1.0f);
  std::vector<int32_t> b(2, 1);
  const std::string p = path("x.safetensors");
  odyssey::write_safetensors(p,
                             {{"w", StDtype::F32, {2, 3}, a.data()}, {"ids", StDtype::I32, {2}, b.data()}});
  SafetensorsFile f(p);
  std::string msg = error_of([&] { f.get("missing.tensor"); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing.tensor"), std::string::npos) << msg;

  std::vector<int64_t> want = {3, 2};
  msg = error_of([&] { f.read_f32("w", &want); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;

  msg = error_of([&] { f.read_f32("ids"); });
  EXPECT_NE(msg.find("'ids'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
  msg = error_of([&] { f.read_i32("w"); });
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;

  std::vector<int64_t> big = {3000000000LL};
  const std::string q = path("big.safetensors");
  odyssey::write_safetensors(q, {{"v", StDtype::I64, {1}, big.data()}});
  msg = error_of([&] { SafetensorsFile(q).read_i32("v"); });
  EXPECT_NE(msg.find("'v'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3000000000"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  float x = 0;
  const std::string p = path("w.safetensors");
  std::string msg = error_of([&] {
    odyssey::write_safetensors(p, {{"a", StDtype::F32, {1}, &x}, {"a", StDtype::F32, {1}, &x}});
  });
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  msg = error_of([&] { odyssey::write_safetensors(p, {{"__metadata__", StDtype::F32, {1}, &x}}); });
  EXPECT_NE(msg.find("__metadata__"), std::string::npos) << msg;
  msg = error_of([&] { odyssey::write_safetensors(p, {{"neg", StDtype::F32, {2, -1}, &x}}); });
  EXPECT_NE(msg.find("'neg'"), std::string::npos) << msg;
  msg = error_of([&] { odyssey::write_safetensors(p, {{"null", StDtype::F32, {2}, nullptr}}); });
  EXPECT_NE(msg.find("'null'"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(p));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);  // no temporaries
}

TEST_F(SafetensorsTest, RawWellFormedFileReads) {
  // Sanity for the corruption cases below: the same construction without a fault is accepted.
  auto p = raw(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U16","shape":[3],"data_offsets":[8,14]}})",
      14);
  SafetensorsFile f(p);
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.read_i32("b"), (std::vector<int32_t>{0x5a5a, 0x5a5a, 0x5a5a}));
}

TEST_F(SafetensorsTest, CorruptFilesAreRejectedNamingFileAndTensor) {
  const std::string ok_a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  // Too short to hold the length.
  {
    const std::string p = path("short.safetensors");
    odyssey::write_text_atomic(p, "abc");
    expect_open_error(p, {"8-byte"});
  }
  // Header length beyond the file.
  expect_open_error(raw("{" + ok_a + "}", 8, 1000), {"header length 1000 exceeds the file"});
  // Not JSON.
  expect_open_error(raw(R"({"a":{"dtype":"F32",)", 0), {"not valid JSON"});
  expect_open_error(raw("[1,2,3]", 0), {"does not start with"});
  // Not an object per tensor, missing and unknown fields.
  expect_open_error(raw(R"({"a":[1,2]})", 0), {"'a'", "not a JSON object"});
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[2]}})", 8), {"'a'", "data_offsets"});
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8),
                    {"'a'", "unknown header field 'extra'"});
  // Unknown dtype, negative or non-integer dimension.
  expect_open_error(raw(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,8]}})", 8), {"'a'", "'F8'"});
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), {"'a'", "shape"});
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), {"'a'", "shape"});
  // Offsets out of range, reversed.
  expect_open_error(raw("{" + ok_a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 12),
                    {"'b'", "run past the data section"});
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                    {"'a'", "end before"});
  // dtype and shape disagree with the byte count.
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                    {"'a'", "need 12 bytes", "hold 8"});
  expect_open_error(raw(R"({"a":{"dtype":"I32","shape":[2,2],"data_offsets":[0,12]}})", 12),
                    {"'a'", "need 16"});
  // Overlap, hole, trailing bytes.
  expect_open_error(raw("{" + ok_a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                    {"'b'", "overlaps", "'a'"});
  expect_open_error(raw("{" + ok_a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
                    {"'b'", "unused bytes"});
  expect_open_error(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                    {"'a'", "unused bytes"});
  expect_open_error(raw("{" + ok_a + "}", 9), {"unused bytes at the end"});
  // The same name twice (nlohmann would silently keep the last).
  expect_open_error(raw("{" + ok_a + "," + ok_a + "}", 8), {"'a'", "twice"});
  // Metadata must map strings to strings.
  expect_open_error(raw(R"({"__metadata__":{"format":1},)" + ok_a + "}", 8), {"__metadata__", "'format'"});
}
