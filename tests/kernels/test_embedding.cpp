// Token + position embedding against a double reference; the backward (a scatter-add over repeated
// tokens) against central differences of L = sum(out * R) over every table entry, with pre-filled
// gradients. Tolerances: forward 1e-6 relative (one float add); backward 2e-5 + 1e-5 |ref| (float sums
// of the few rows of dout that share a token or position, plus the base).
#include "odyssey/kernels/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "reference.h"

using namespace odyssey;
using namespace odyssey::test;

// Named, not anonymous: test_kernels' unity batches join files that each have their own N, C, ...
namespace embedding_test {

constexpr int N = 37 * 3, C = 40, V = 67, maxT = 50;

std::vector<double> embedding_reference(const std::vector<int>& tok, const std::vector<int>& pos,
                                        const std::vector<double>& wte, const std::vector<double>& wpe) {
  std::vector<double> out(static_cast<size_t>(N) * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) out[n * C + c] = wte[tok[n] * C + c] + wpe[pos[n] * C + c];
  return out;
}

TEST(Embedding, ForwardMatchesReference) {
  auto tok = random_ints(N, 1, 0, V - 1), pos = random_ints(N, 2, 0, maxT - 1);
  auto wte = random_floats(V * C, 3), wpe = random_floats(maxT * C, 4);
  std::vector<float> out(N * C);
  embedding_forward(out.data(), tok.data(), pos.data(), wte.data(), wpe.data(), N, C);
  expect_close(out, embedding_reference(tok, pos, to_double(wte), to_double(wpe)), 0.0, 1e-6, "out");
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  // N = 111 tokens over V = 67 and 50 positions: many repeats, and some rows never used.
  auto tok = random_ints(N, 5, 0, V - 1), pos = random_ints(N, 6, 0, maxT - 1);
  auto wte = random_floats(V * C, 7), wpe = random_floats(maxT * C, 8), R = random_floats(N * C, 9);
  auto dwte = random_floats(V * C, 10), dwpe = random_floats(maxT * C, 11);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), pos.data(), N, C);

  auto te = to_double(wte), pe = to_double(wpe), r = to_double(R);
  auto loss = [&] { return dot(embedding_reference(tok, pos, te, pe), r); };
  const double h = 1e-3;  // L is linear in the tables
  for (size_t i = 0; i < te.size(); ++i) {
    const double expected = dwte0[i] + central_difference(te, i, h, loss);
    EXPECT_NEAR(dwte[i], expected, 2e-5 + 1e-5 * std::abs(expected)) << "dwte[" << i << "]";
  }
  for (size_t i = 0; i < pe.size(); ++i) {
    const double expected = dwpe0[i] + central_difference(pe, i, h, loss);
    EXPECT_NEAR(dwpe[i], expected, 2e-5 + 1e-5 * std::abs(expected)) << "dwpe[" << i << "]";
  }
}

// Threads split channels, so every element is summed in token order whatever the thread count.
TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
  constexpr int n = 4096, c = 100;  // large enough for the threaded path; c not a multiple of 16
  auto tok = random_ints(n, 12, 0, 9), pos = random_ints(n, 13, 0, 31);
  auto dout = random_floats(n * c, 14);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    std::vector<float> dwte(10 * c, 0.0f), dwpe(32 * c, 0.0f);
    embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), pos.data(), n, c);
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    results.push_back(dwte);
  }
  omp_set_num_threads(saved);
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[0], results[i]);
}

}  // namespace embedding_test
