// Token + position embedding. The backward scatters rows of dout into the rows of dwte/dwpe named
// by the tokens; tokens repeat, so threads split the channels instead of the tokens: every element
// of dwte is then written by one thread, in token order (deterministic, no atomics).
#include "odyssey/kernels/embedding.h"

#include <algorithm>
#include <cstddef>

#include <omp.h>

#include "odyssey/kernels/parallel_min.h"

namespace odyssey {

void embedding_forward(float* out, const int* tokens, const int* positions, const float* wte,
                       const float* wpe, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* te = wte + static_cast<size_t>(tokens[n]) * C;
    float* y = out + static_cast<size_t>(n) * C;
    if (!wpe) {
      std::copy(te, te + C, y);
      continue;
    }
    const float* pe = wpe + static_cast<size_t>(positions[n]) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = te[c] + pe[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, const int* positions,
                        int N, int C) {
  // Each thread takes one contiguous run of channels, cut at multiples of 16 floats (a 64-byte line)
  // so two threads rarely write the same cache line.
  constexpr int kSlice = 16;
  const int slices = (C + kSlice - 1) / kSlice;
#pragma omp parallel if (static_cast <size_t>(N) * C >= kParallelMinElements)
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int c0 = std::min(C, slices * t / threads * kSlice);
    const int c1 = std::min(C, slices * (t + 1) / threads * kSlice);
    for (int n = 0; n < N && c0 < c1; ++n) {
      const float* dy = dout + static_cast<size_t>(n) * C;
      float* te = dwte + static_cast<size_t>(tokens[n]) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) te[c] += dy[c];
      if (!dwpe) continue;
      float* pe = dwpe + static_cast<size_t>(positions[n]) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) pe[c] += dy[c];
    }
  }
}

}  // namespace odyssey
