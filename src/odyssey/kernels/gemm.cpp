// oneDNN matmul with a primitive cache. Building a matmul primitive costs far more than running a
// small one, and a training step repeats the same few shapes, so primitives are built once per
// (shape, transposes, post-ops, thread count) and reused. Debian's libdnnl uses the OpenMP runtime,
// so it runs on omp_get_max_threads() threads like the rest of the kernels.
#include "odyssey/kernels/gemm.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
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
// created with (its own primitive cache keys on it too); so are the row strides, which change it too.
using Key = std::tuple<int, int, int, bool, bool, bool, bool, int, int64_t, int64_t, int64_t>;

// Padded B: rows of N + 16 floats (64 bytes more). Not a cache-aliasing fix (N = 2048 was fast
// unpadded): a B whose rows are not dense makes oneDNN's sgemm take its packing path. Only where the copy is
// cheap against the product (M >= 256 rows share it) and the scratch stays within kPadScratchBytes.
constexpr int kPadFloats = 16;
constexpr int kPadMinN = 2048, kPadMinM = 256;
constexpr uint64_t kPadScratchBytes = uint64_t(64) << 20;

std::atomic<int>& pad_b_setting() {  // -1: not read yet
  static std::atomic<int> setting{-1};
  return setting;
}

// With a transposed A (the weight gradient dW += dout^T x) a power-of-two-wide B was as fast unpadded
// and the copy made it slower (4 x 512 model's M = 512, N = 2048, K = 2048: 130-158 GFLOP/s against
// 89-131 padded); at other widths (GPT-2's 3072) padding won there too.
bool pads_b(int M, int N, int K, bool trans_a, bool trans_b) {
  const bool power_of_two = (N & (N - 1)) == 0;
  return !trans_b && N >= kPadMinN && M >= kPadMinM && !(trans_a && power_of_two) &&
         uint64_t(K) * uint64_t(N + kPadFloats) * sizeof(float) <= kPadScratchBytes && gemm_pad_b();
}

// B [K, N] (row stride N) copied to rows of ldb floats, in this thread's scratch.
const float* padded_copy(const float* B, int K, int N, int ldb) {
  thread_local std::vector<float> scratch;
  scratch.resize(size_t(K) * size_t(ldb));
  float* out = scratch.data();  // the caller's: inside the parallel loop `scratch` names each thread's own
#pragma omp parallel for schedule(static)
  for (int k = 0; k < K; ++k)
    std::memcpy(out + size_t(k) * size_t(ldb), B + size_t(k) * size_t(N), size_t(N) * sizeof(float));
  return out;
}

struct Entry {
  dnnl::matmul prim;
  memory::desc a, b, bias, c;
};

// Row-major [rows, cols] stored either as is or transposed ([cols, rows] in memory), rows (or columns)
// `ld` floats apart.
memory::desc matrix_desc(int rows, int cols, bool transposed, int64_t ld) {
  Dims strides = transposed ? Dims{1, ld} : Dims{ld, 1};
  return memory::desc(Dims{rows, cols}, memory::data_type::f32, strides);
}

Entry build(const Key& key) {
  auto [M, N, K, trans_a, trans_b, accumulate, has_bias, threads, lda, ldb, ldc] = key;
  (void)threads;
  Entry e;
  e.a = matrix_desc(M, K, trans_a, lda);  // op(A) [M, K]
  e.b = matrix_desc(K, N, trans_b, ldb);  // op(B) [K, N]
  e.c = matrix_desc(M, N, false, ldc);
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
void gemm_empty_k(float* C, int64_t ldc, const float* bias, int M, int N, bool accumulate) {
  for (int i = 0; i < M; ++i) {
    float* c = C + static_cast<size_t>(i) * size_t(ldc);
    for (int j = 0; j < N; ++j) c[j] = (accumulate ? c[j] : 0.0f) + (bias ? bias[j] : 0.0f);
  }
}

}  // namespace

void gemm(float* C, const float* A, const float* B, const float* bias, int M, int N, int K, bool trans_a,
          bool trans_b, bool accumulate, GemmLd ld) {
  ODY_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  const int64_t lda = ld.a > 0 ? ld.a : (trans_a ? M : K), ldc = ld.c > 0 ? ld.c : N;
  ODY_CHECK(lda >= (trans_a ? M : K) && ldc >= N,
            "gemm: row strides lda={} ldc={} narrower than M={} N={} K={}", lda, ldc, M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) return gemm_empty_k(C, ldc, bias, M, N, accumulate);
  const bool pad = pads_b(M, N, K, trans_a, trans_b);
  const int ldb = pad ? N + kPadFloats : (trans_b ? K : N);
  if (pad) B = padded_copy(B, K, N, ldb);
  Key key{M, N, K, trans_a, trans_b, accumulate, bias != nullptr, omp_get_max_threads(), lda, ldb, ldc};
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

void gemm_pad_b_from_env() {
  const char* env = std::getenv("ODYSSEY_GEMM_PAD_B");
  const std::string value = env ? env : "";
  ODY_CHECK(value.empty() || value == "0" || value == "1", "ODYSSEY_GEMM_PAD_B={}: expected 0 or 1", value);
  pad_b_setting().store(value != "0" ? 1 : 0);
}

bool gemm_pad_b() {
  if (pad_b_setting().load() < 0) gemm_pad_b_from_env();
  return pad_b_setting().load() == 1;
}

void set_gemm_pad_b(bool on) {
  pad_b_setting().store(on ? 1 : 0);
}

uint64_t gemm_scratch_bytes(int widest_n) {
  return widest_n >= kPadMinN && gemm_pad_b() ? kPadScratchBytes : 0;
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
