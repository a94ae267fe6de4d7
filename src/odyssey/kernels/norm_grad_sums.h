// The weight-gradient sums of a norm's backward (LayerNorm: dweight and dbias; RMSNorm: dweight),
// reduced in a fixed order so the result is bitwise the same for any thread count: rows in blocks of
// 32 counted from the first row, each block summed row by row into a partial of `width` floats, the
// partials folded block by block, in order, into one running sum, added to the gradient by finish().
// Rows may arrive in consecutive pieces of any size (the fused LM head's chunks, lm_head.h): a block
// cut by a piece boundary is continued by the next piece, so the sums are bitwise those of one call
// over all the rows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace odyssey {

class NormGradSums {
 public:
  static constexpr int kRowsPerBlock = 32;

  explicit NormGradSums(int width = 0) { reset(width); }
  // Starts new sums of `width` floats per partial.
  void reset(int width) {
    width_ = width;
    rows_ = 0;
    sum_.assign(size_t(width), 0.0f);
    open_.assign(size_t(width), 0.0f);
  }
  int width() const { return width_; }

  // Rows [0, n) of the next piece: row(r, partial) computes the piece's row r and adds its terms to
  // the block partial (width floats).
  template <typename Row>
  void add(int n, Row&& row) {
    const int open_rows = int(rows_ % kRowsPerBlock);
    const int first = open_rows ? std::min(n, kRowsPerBlock - open_rows) : 0;
    for (int r = 0; r < first; ++r) row(r, open_.data());  // the block the last piece left open
    if (first > 0 && (open_rows + first) % kRowsPerBlock == 0) fold(open_.data(), 1), zero(open_);
    const int rest = n - first, blocks = (rest + kRowsPerBlock - 1) / kRowsPerBlock;
    partial_.assign(size_t(blocks) * size_t(width_), 0.0f);
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      float* p = partial_.data() + size_t(blk) * size_t(width_);
      const int end = std::min(rest, (blk + 1) * kRowsPerBlock);
      for (int r = blk * kRowsPerBlock; r < end; ++r) row(first + r, p);
    }
    const int complete = rest / kRowsPerBlock;
    fold(partial_.data(), complete);
    if (complete < blocks)
      std::copy(partial_.begin() + ptrdiff_t(complete) * width_, partial_.end(), open_.begin());
    rows_ += n;
  }

  // Adds the sums (the last block, if open, folded first) to dweight [width], or with dbias its first
  // half to dweight and its second to dbias [width / 2], and starts again.
  void finish(float* dweight, float* dbias = nullptr) {
    if (rows_ % kRowsPerBlock) fold(open_.data(), 1);
    const int half = dbias ? width_ / 2 : width_;
    for (int j = 0; j < width_; ++j) (j < half ? dweight[j] : dbias[j - half]) += sum_[size_t(j)];
    reset(width_);
  }

 private:
  // sum += each of `blocks` partials, in order; channels in slices over the threads.
  void fold(const float* partials, int blocks) {
    constexpr int kSlice = 64;
    const int slices = (width_ + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static)
    for (int sl = 0; sl < slices; ++sl) {
      const int c0 = sl * kSlice, w = std::min(kSlice, width_ - c0);
      float* s = sum_.data() + c0;
      for (int blk = 0; blk < blocks; ++blk) {
        const float* p = partials + size_t(blk) * size_t(width_) + c0;
#pragma omp simd
        for (int j = 0; j < w; ++j) s[j] += p[j];
      }
    }
  }
  static void zero(std::vector<float>& v) {
    std::fill(v.begin(), v.end(), 0.0f);
  }

  int width_ = 0;
  long long rows_ = 0;          // rows added since reset
  std::vector<float> sum_;      // [width] the folded blocks
  std::vector<float> open_;     // [width] the partial of the block the last piece left open
  std::vector<float> partial_;  // [blocks, width] one piece's blocks
};

}  // namespace odyssey
