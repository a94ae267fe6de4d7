#include "odyssey/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/ranges.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "odyssey/core/error.h"
#include "odyssey/core/file_util.h"

namespace odyssey {

namespace {

using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1}, {StDtype::U8, "U8", 1},   {StDtype::I8, "I8", 1},
    {StDtype::U16, "U16", 2},   {StDtype::I16, "I16", 2}, {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::U32, "U32", 4}, {StDtype::I32, "I32", 4},
    {StDtype::F32, "F32", 4},   {StDtype::U64, "U64", 8}, {StDtype::I64, "I64", 8},
    {StDtype::F64, "F64", 8},
};

const DtypeInfo& info(StDtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  fail("safetensors: invalid dtype value {}", int(d));
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: exactly representable as a normal float.
    float f = std::ldexp(float(mant), -24);
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Multiplies checking for overflow of the (signed) 64-bit range.
bool mul_overflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t(1) << 30));
    if (n < 0 && errno == EINTR) continue;
    ODY_CHECK(n > 0, "cannot write {}: {}", path, std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

}  // namespace

size_t st_dtype_size(StDtype dtype) {
  return info(dtype).size;
}
const char* st_dtype_name(StDtype dtype) {
  return info(dtype).name;
}

StDtype st_dtype_from_name(const std::string& name) {
  for (const auto& i : kDtypes)
    if (name == i.name) return i.dtype;
  fail("unknown safetensors dtype '{}'", name);
}

std::string st_shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------------------------------------
// Writer

void write_safetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::vector<size_t> sizes;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    ODY_CHECK(!t.name.empty(), "{}: cannot write a tensor with an empty name", path);
    ODY_CHECK(t.name != "__metadata__", "{}: '__metadata__' is reserved and cannot name a tensor", path);
    ODY_CHECK(names.insert(t.name).second, "{}: tensor '{}' given twice", path, t.name);
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      ODY_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension in shape {}", path, t.name,
                st_shape_string(t.shape));
      ODY_CHECK(!mul_overflows(numel, d, &numel), "{}: tensor '{}' shape {} overflows", path, t.name,
                st_shape_string(t.shape));
    }
    const size_t bytes = size_t(numel) * st_dtype_size(t.dtype);
    ODY_CHECK(bytes == 0 || t.data != nullptr, "{}: tensor '{}' has no data", path, t.name);
    header[t.name] = {
        {"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  // Streamed rather than assembled in memory (a model can be gigabytes), with the same protocol as
  // write_file_atomic: temporary name, fsync, rename.
  const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ODY_CHECK(fd >= 0, "cannot create {}: {}", tmp, std::strerror(errno));
  try {
    write_all(fd, len, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (size_t i = 0; i < tensors.size(); ++i) write_all(fd, tensors[i].data, sizes[i], tmp);
    ODY_CHECK(::fsync(fd) == 0, "cannot flush {}: {}", tmp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot close {}: {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ODY_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path, std::strerror(err));
  }
  const uint64_t file_bytes = uint64_t(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, file_bytes);
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  ODY_CHECK(map != MAP_FAILED, "cannot map {}: {}", path, std::strerror(map_err));
  map_ = map;
  map_bytes_ = file_bytes;

  try {
    const uint8_t* base = static_cast<const uint8_t*>(map_);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(base[i]) << (8 * i);
    ODY_CHECK(n <= file_bytes - 8, "{}: header length {} exceeds the file ({} bytes after the length field)",
              path, n, file_bytes - 8);
    ODY_CHECK(n <= kMaxHeaderBytes, "{}: header length {} exceeds the {} byte limit", path, n,
              kMaxHeaderBytes);
    ODY_CHECK(n >= 2, "{}: header length {} is too short for a JSON object", path, n);
    const char* text = reinterpret_cast<const char*>(base + 8);
    ODY_CHECK(text[0] == '{', "{}: header does not start with '{{' (not a safetensors file?)", path);

    // nlohmann keeps the last of duplicate keys silently; catch them while parsing.
    std::set<std::string> seen;
    std::string duplicate;
    auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1) {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
      }
      return true;
    };
    json header;
    try {
      header = json::parse(text, text + n, on_event);
    } catch (const json::exception& e) {
      fail("{}: header is not valid JSON: {}", path, e.what());
    }
    ODY_CHECK(duplicate.empty(), "{}: tensor '{}' appears twice in the header", path, duplicate);
    ODY_CHECK(header.is_object(), "{}: header is not a JSON object", path);

    const uint64_t data_bytes = file_bytes - 8 - n;
    const uint8_t* data = base + 8 + n;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const json& v = it.value();
      if (name == "__metadata__") {
        ODY_CHECK(v.is_object(), "{}: __metadata__ is not a JSON object", path);
        for (auto m = v.begin(); m != v.end(); ++m) {
          ODY_CHECK(m.value().is_string(), "{}: __metadata__ value for '{}' is not a string", path, m.key());
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      ODY_CHECK(v.is_object(), "{}: tensor '{}': header entry is not a JSON object", path, name);
      for (auto f = v.begin(); f != v.end(); ++f)
        ODY_CHECK(f.key() == "dtype" || f.key() == "shape" || f.key() == "data_offsets",
                  "{}: tensor '{}': unknown header field '{}'", path, name, f.key());
      ODY_CHECK(v.contains("dtype") && v["dtype"].is_string(),
                "{}: tensor '{}': missing or non-string 'dtype'", path, name);
      ODY_CHECK(v.contains("shape") && v["shape"].is_array(), "{}: tensor '{}': missing or non-array 'shape'",
                path, name);
      ODY_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
                "{}: tensor '{}': 'data_offsets' must be an array of two integers", path, name);

      Tensor t;
      t.name = name;
      const std::string dtype_name = v["dtype"].get<std::string>();
      bool known = false;
      for (const auto& i : kDtypes)
        if (dtype_name == i.name) t.dtype = i.dtype, known = true;
      ODY_CHECK(known, "{}: tensor '{}': unknown dtype '{}'", path, name, dtype_name);
      t.numel = 1;
      for (const json& d : v["shape"]) {
        ODY_CHECK(d.is_number_unsigned(),
                  "{}: tensor '{}': shape {} has a dimension that is not a non-negative integer", path, name,
                  v["shape"].dump());
        const uint64_t dim = d.get<uint64_t>();
        ODY_CHECK(dim <= uint64_t(std::numeric_limits<int64_t>::max()) &&
                      !mul_overflows(t.numel, int64_t(dim), &t.numel),
                  "{}: tensor '{}': shape {} overflows", path, name, v["shape"].dump());
        t.shape.push_back(int64_t(dim));
      }
      const json& off = v["data_offsets"];
      ODY_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                "{}: tensor '{}': data_offsets {} are not non-negative integers", path, name, off.dump());
      const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
      ODY_CHECK(begin <= end, "{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name,
                begin, end);
      ODY_CHECK(end <= data_bytes,
                "{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", path, name,
                begin, end, data_bytes);
      int64_t expect = 0;
      ODY_CHECK(!mul_overflows(t.numel, int64_t(st_dtype_size(t.dtype)), &expect) &&
                    uint64_t(expect) == end - begin,
                "{}: tensor '{}': dtype {} and shape {} need {} bytes but data_offsets [{}, {}] hold {}",
                path, name, dtype_name, st_shape_string(t.shape), expect, begin, end, end - begin);
      t.data = data + begin;
      t.bytes = size_t(end - begin);
      tensors_.push_back(std::move(t));
    }

    // The data section must be covered exactly once: no overlaps, no holes, nothing trailing.
    std::sort(tensors_.begin(), tensors_.end(), [](const Tensor& a, const Tensor& b) {
      return std::pair(a.data, a.data + a.bytes) < std::pair(b.data, b.data + b.bytes);
    });
    uint64_t pos = 0;
    const Tensor* prev = nullptr;
    for (const Tensor& t : tensors_) {
      const uint64_t begin = uint64_t(t.data - data);
      if (begin < pos)
        fail("{}: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", path, t.name, begin,
             begin + t.bytes, prev->name, uint64_t(prev->data - data), pos);
      if (begin > pos)
        fail("{}: {} unused bytes in the data section before tensor '{}' (at {})", path, begin - pos, t.name,
             pos);
      pos = begin + t.bytes;
      prev = &t;
    }
    ODY_CHECK(pos == data_bytes,
              "{}: {} unused bytes at the end of the data section (tensors end at {} of {})", path,
              data_bytes - pos, pos, data_bytes);
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  release();
}

void SafetensorsFile::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      metadata_(std::move(other.metadata_)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    metadata_ = std::move(other.metadata_);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
  }
  return *this;
}

const SafetensorsFile::Tensor* SafetensorsFile::try_get(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsFile::Tensor& SafetensorsFile::get(const std::string& name) const {
  const Tensor* t = try_get(name);
  ODY_CHECK(t, "{}: no tensor named '{}'", path_, name);
  return *t;
}

void SafetensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                               float* out) const {
  const Tensor& t = get(name);
  ODY_CHECK(t.shape == expected_shape, "{}: tensor '{}' has shape {}, expected {}", path_, name,
            st_shape_string(t.shape), st_shape_string(expected_shape));
  const uint8_t* p = t.data;
  const size_t n = size_t(t.numel);
  switch (t.dtype) {
    case StDtype::F32:
      std::memcpy(out, p, n * 4);
      break;
    case StDtype::F64:
      for (size_t i = 0; i < n; ++i) out[i] = float(load<double>(p + 8 * i));
      break;
    case StDtype::F16:
      for (size_t i = 0; i < n; ++i) out[i] = half_to_float(load<uint16_t>(p + 2 * i));
      break;
    case StDtype::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint32_t bits = uint32_t(load<uint16_t>(p + 2 * i)) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      break;
    default:
      fail("{}: tensor '{}' has dtype {}, expected a floating-point dtype (F32, F16, BF16, F64)", path_, name,
           st_dtype_name(t.dtype));
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name,
                                             const std::vector<int64_t>* expected_shape) const {
  const Tensor& t = get(name);
  std::vector<float> out(size_t(t.numel));
  read_f32(name, expected_shape ? *expected_shape : t.shape, out.data());
  return out;
}

std::vector<int32_t> SafetensorsFile::read_i32(const std::string& name) const {
  const Tensor& t = get(name);
  const uint8_t* p = t.data;
  std::vector<int32_t> out(size_t(t.numel));
  auto convert = [&]<typename T>(T) {
    for (size_t i = 0; i < out.size(); ++i) {
      T v = load<T>(p + sizeof(T) * i);
      ODY_CHECK(std::in_range<int32_t>(v), "{}: tensor '{}': element {} ({}) does not fit in int32", path_,
                name, i, v);
      out[i] = int32_t(v);
    }
  };
  switch (t.dtype) {
    case StDtype::I32:
      convert(int32_t{});
      break;
    case StDtype::I64:
      convert(int64_t{});
      break;
    case StDtype::U32:
      convert(uint32_t{});
      break;
    case StDtype::U16:
      convert(uint16_t{});
      break;
    case StDtype::I16:
      convert(int16_t{});
      break;
    case StDtype::U8:
      convert(uint8_t{});
      break;
    case StDtype::I8:
      convert(int8_t{});
      break;
    default:
      fail("{}: tensor '{}' has dtype {}, expected an integer dtype", path_, name, st_dtype_name(t.dtype));
  }
  return out;
}

}  // namespace odyssey
