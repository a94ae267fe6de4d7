// ZeroPages: a float array that reads as zeros and takes memory only for the pages written to
// (anonymous mmap). A model-sized staging buffer of which a rank fills only the slices it keeps
// (resuming under ZeRO-3) then costs this rank only those slices, not the dense model.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>

namespace odyssey {

class ZeroPages {
 public:
  explicit ZeroPages(size_t n) : size_(n) {
    if (n == 0) return;
    void* p = mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<float*>(p);
  }
  ~ZeroPages() {
    if (data_) munmap(data_, size_ * sizeof(float));
  }
  ZeroPages(const ZeroPages&) = delete;
  ZeroPages& operator=(const ZeroPages&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace odyssey
