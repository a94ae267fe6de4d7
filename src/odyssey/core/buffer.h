// FloatBuffer: an owning, 64-byte aligned, zero-initialised array of floats. Parameters, gradients,
// optimizer moments and activations all live in these (flat buffers, as DESIGN.md says).
// Buffers of 64 MiB and more are anonymous mappings, whose pages read as zero and take memory only
// once written: a model-sized gradient or moment buffer costs nothing until the first step uses it
// (a dry run never does), and no start-up pass writes gigabytes of zeros.
// Smaller buffers come from calloc, which clears only memory that is not fresh from the OS: a block
// malloc maps for it reads as zero already, so a large activation buffer is not written twice (once
// by the kernel's zero page fault, once by a memset) before its first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <sys/mman.h>

namespace odyssey {

// p[0, n) = 0 on every OpenMP thread, in 64 KiB blocks: one thread's memset leaves the other cores
// idle and does not saturate the memory bus (a step's gradient and d(qkv) zeroing ran at half the
// wall rate). Below 128 KiB the calling thread does it alone.
template <typename T>
void fill_zero(T* p, size_t n) {
  constexpr size_t kBlock = (size_t{1} << 16) / sizeof(T);
  const size_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 2)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t at = b * kBlock;
    std::memset(static_cast<void*>(p + at), 0, (n - at < kBlock ? n - at : kBlock) * sizeof(T));
  }
}

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }

  // Reallocates (contents are lost) and zero-fills.
  void resize(size_t n) {
    data_.reset();
    size_ = n;
    if (n == 0) return;
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* base = nullptr;
    void* p = nullptr;
    if (bytes >= kMappedBytes) {  // page-aligned, already zero
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) base = nullptr;
      p = base;
    } else if ((base = std::calloc(1, bytes + 64))) {  // calloc aligns to 16 bytes: align up to 64
      p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + 63) & ~uintptr_t{63});
    }
    if (!p) {
      size_ = 0;
      throw std::bad_alloc();
    }
    data_ = std::unique_ptr<T, Free>(static_cast<T*>(p), Free{base, bytes});
  }
  // Exactly n elements: reallocated (contents lost, zero-filled) when the size differs, kept otherwise.
  void fit(size_t n) {
    if (size_ != n) resize(n);
  }
  // At least n elements (grown, contents lost, when smaller; kept otherwise): reused scratch.
  T* at_least(size_t n) {
    if (size_ < n) resize(n);
    return data();
  }
  void zero() { fill_zero(data_.get(), size_); }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  static constexpr size_t kMappedBytes = size_t{64} << 20;
  struct Free {
    void* base = nullptr;  // what mmap or calloc returned (the data is aligned up from it)
    size_t bytes = 0;
    void operator()(T*) const {
      if (bytes >= kMappedBytes)
        munmap(base, bytes);
      else
        std::free(base);
    }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

using FloatBuffer = AlignedBuffer<float>;
using IntBuffer = AlignedBuffer<int32_t>;

// Bytes per element of the buffer a pointer to member names (a size written as elements, summed in
// bytes: the activations' bytes_for).
template <typename T, typename S>
constexpr size_t element_bytes(AlignedBuffer<T> S::*) {
  return sizeof(T);
}

// The bytes s's buffers hold now, walking its class's one list of them: list(f) calls f(&S::buffer,
// elements) for each buffer (the elements, what allocate sizes it to, are not used here). Keeps what
// is held and what allocate sizes (the same list) from drifting apart.
template <typename S, typename List>
size_t held_bytes(const S& s, List&& list) {
  size_t n = 0;
  list([&](auto m, size_t) { n += (s.*m).bytes(); });
  return n;
}

// Sizes s's buffers to what the same list says (AlignedBuffer::fit each).
template <typename S, typename List>
void fit_listed(S& s, List&& list) {
  list([&](auto m, size_t elements) { (s.*m).fit(elements); });
}

// The bytes the list sizes its buffers to: what fit_listed would hold, without allocating.
template <typename List>
size_t listed_bytes(List&& list) {
  size_t n = 0;
  list([&](auto m, size_t elements) { n += elements * element_bytes(m); });
  return n;
}

}  // namespace odyssey
