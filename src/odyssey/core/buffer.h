// FloatBuffer: an owning, 64-byte aligned, zero-initialised array of floats. Parameters, gradients,
// optimizer moments and activations all live in these (flat buffers, as DESIGN.md says).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace odyssey {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }

  // Reallocates (contents are lost) and zero-fills.
  void resize(size_t n) {
    size_ = n;
    if (n == 0) {
      data_.reset();
      return;
    }
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.reset(static_cast<T*>(p));
  }
  void zero() {
    if (size_) std::memset(data_.get(), 0, size_ * sizeof(T));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

using FloatBuffer = AlignedBuffer<float>;
using IntBuffer = AlignedBuffer<int32_t>;

}  // namespace odyssey
