// Tensors with a dtype and a device: a view (data, dtype, device, shape, strides) of memory someone
// else owns, as every seam that moves or sizes tensors takes them (the communicator's payloads, the
// footprint's byte counts). Kernels stay fp32 inside; bf16 is a storage and wire type (a uint16 of an
// fp32's high half, core/bf16 when it lands). Device is the host only until the GPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "odyssey/core/enum_names.h"

namespace odyssey {

enum class DType { f32, bf16, i32, u8 };
inline constexpr EnumNames<DType, 4> kDTypeNames = {
    {{"f32", DType::f32}, {"bf16", DType::bf16}, {"i32", DType::i32}, {"u8", DType::u8}}};

// Bytes of one element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::u8:
      return 1;
  }
  return 0;
}

enum class Device { host };

// Row-major unless strides say otherwise; strides in elements. An empty shape is a scalar.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::host;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: contiguous row-major

  TensorView() = default;
  TensorView(void* d, DType t, std::vector<int64_t> s, std::vector<int64_t> st = {})
      : data(d), dtype(t), shape(std::move(s)), strides(std::move(st)) {}

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  // True when the elements are one dense row-major run (the only kind a payload may be).
  bool contiguous() const {
    int64_t expect = 1;
    for (size_t i = strides.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// A contiguous view of n elements at data.
inline TensorView flat_view(void* data, DType dtype, size_t n) {
  return TensorView(data, dtype, {int64_t(n)});
}
inline TensorView flat_view(const void* data, DType dtype, size_t n) {
  return TensorView(const_cast<void*>(data), dtype, {int64_t(n)});
}

}  // namespace odyssey
