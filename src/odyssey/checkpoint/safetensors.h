// The safetensors format (https://github.com/huggingface/safetensors):
//   8 bytes  little-endian u64 N, the header length
//   N bytes  JSON: {"__metadata__": {str: str}?, name: {"dtype": "F32", "shape": [..],
//            "data_offsets": [begin, end]}, ...}, offsets relative to the data section
//   rest     the data section: tensors back to back, little-endian, row-major, no holes
// The writer pads the header with spaces to a multiple of 8 (as the reference library does), so
// tensor data starts 8-byte aligned in the file. The reader memory-maps the file and validates it
// completely before handing out any tensor; every error names the file and, where there is one,
// the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace odyssey {

enum class StDtype { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

size_t st_dtype_size(StDtype dtype);
const char* st_dtype_name(StDtype dtype);
// Fails naming the string when it is not a safetensors dtype.
StDtype st_dtype_from_name(const std::string& name);

// One tensor to write; data holds numel(shape) * st_dtype_size(dtype) bytes.
struct StTensorRef {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes the tensors in the given order, atomically (temporary file, fsync, rename). Fails on a
// duplicate or empty name, a negative dimension or the reserved name "__metadata__".
void write_safetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  struct Tensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    const uint8_t* data = nullptr;  // into the mapping; may be unaligned, read with memcpy
    size_t bytes = 0;
  };

  // Maps and validates the whole file; fails naming the file (and tensor) on anything malformed.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // In the order of their data in the file.
  const std::vector<Tensor>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return try_get(name) != nullptr; }
  const Tensor* try_get(const std::string& name) const;
  const Tensor& get(const std::string& name) const;  // fails naming the file and the tensor

  // Tensor `name` converted to fp32 (from F32, F16, BF16 or F64). When expected_shape is given the
  // tensor must have exactly that shape; fails naming the file, tensor and both shapes.
  std::vector<float> read_f32(const std::string& name,
                              const std::vector<int64_t>* expected_shape = nullptr) const;
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, float* out) const;
  // Tensor `name` as int32 (from I32, I64, U16, U32, I16, U8, I8); fails if a value does not fit.
  std::vector<int32_t> read_i32(const std::string& name) const;

 private:
  void release();

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
};

std::string st_shape_string(const std::vector<int64_t>& shape);  // "[3, 4]"

}  // namespace odyssey
