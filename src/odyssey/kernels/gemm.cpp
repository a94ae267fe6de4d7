// oneDNN matmul with a primitive cache. Building a matmul primitive costs far more than running a
// small one, and a training step repeats the same few shapes, so primitives are built once per
// (shape, transposes, post-ops, thread count) and reused. Debian's libdnnl uses the OpenMP runtime,
// so it runs on omp_get_max_threads() threads like the rest of the kernels.
#include "odyssey/kernels/gemm.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/timer.h"

namespace odyssey {
namespace {

using dnnl::memory;
using Dims = memory::dims;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A stream per calling thread: streams are cheap and this keeps gemm() callable from any thread.
dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// The thread count is part of the key because oneDNN picks its blocking for the threads it was
// created with (its own primitive cache keys on it too).
using Key = std::tuple<int, int, int, bool, bool, bool, bool, int>;

struct Entry {
  dnnl::matmul prim;
  memory::desc a, b, bias, c;
};

// Row-major [rows, cols] stored either as is or transposed ([cols, rows] in memory).
memory::desc matrix_desc(int rows, int cols, bool transposed) {
  Dims strides = transposed ? Dims{1, rows} : Dims{cols, 1};
  return memory::desc(Dims{rows, cols}, memory::data_type::f32, strides);
}

Entry build(const Key& key) {
  auto [M, N, K, trans_a, trans_b, accumulate, has_bias, threads] = key;
  (void)threads;
  Entry e;
  e.a = matrix_desc(M, K, trans_a);  // op(A) [M, K]
  e.b = matrix_desc(K, N, trans_b);  // op(B) [K, N]
  e.c = matrix_desc(M, N, false);
  e.bias = memory::desc(Dims{1, N}, memory::data_type::f32, Dims{N, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    // C = A B (+ bias) + 1.0 * C_old: the sum post-op reads dst before it is overwritten.
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  auto desc = has_bias ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c) : dnnl::matmul::desc(e.a, e.b, e.c);
  e.prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu_engine()));
  return e;
}

const Entry& cached(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, Entry> cache;  // std::map: references stay valid as it grows
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build(key)).first;
  return it->second;
}

// K == 0: the product is empty, C = bias (+ C). oneDNN is not asked about empty reductions.
void gemm_empty_k(float* C, const float* bias, int M, int N, bool accumulate) {
  for (int i = 0; i < M; ++i) {
    float* c = C + static_cast<size_t>(i) * N;
    for (int j = 0; j < N; ++j) c[j] = (accumulate ? c[j] : 0.0f) + (bias ? bias[j] : 0.0f);
  }
}

}  // namespace

void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool trans_a,
          bool trans_b, bool accumulate) {
  ODY_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) return gemm_empty_k(C, bias, M, N, accumulate);
  Key key{M, N, K, trans_a, trans_b, accumulate, bias != nullptr, omp_get_max_threads()};
  try {
    const Entry& e = cached(key);
    auto& engine = cpu_engine();
    // oneDNN takes non-const handles; inputs are only read.
    memory a(e.a, engine, const_cast<float*>(A));
    memory b(e.b, engine, const_cast<float*>(B));
    memory c(e.c, engine, C);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, engine, const_cast<float*>(bias)));
    e.prim.execute(cpu_stream(), args);
    cpu_stream().wait();
  } catch (const dnnl::error& err) {
    fail("gemm M={} N={} K={} trans_a={} trans_b={}: oneDNN error: {}", M, N, K, trans_a, trans_b,
         err.what());
  }
}

double measure_gemm_gflops(int n, double seconds) {
  ODY_CHECK(n > 0, "measure_gemm_gflops: n must be positive, got {}", n);
  size_t elems = static_cast<size_t>(n) * n;
  // Values do not matter for the timing; small ones keep denormals and infinities out.
  std::vector<float> a(elems, 0.01f), b(elems, 0.02f), c(elems, 0.0f);
  gemm(c.data(), a.data(), b.data(), nullptr, n, n, n, false, false, false);  // build + warm caches
  Timer timer;
  long calls = 0;
  do {
    gemm(c.data(), a.data(), b.data(), nullptr, n, n, n, false, false, false);
    ++calls;
  } while (timer.seconds() < seconds);
  return 2.0 * n * n * static_cast<double>(n) * calls / timer.seconds() / 1e9;
}

}  // namespace odyssey
