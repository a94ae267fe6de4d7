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
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/core/log.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/cpu_info.h"

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
// The operand and dst dtypes close the key (mixed-precision.md §5.2): f32 x f32 -> f32 for gemm(),
// bf16 x bf16 -> f32 or bf16 for gemm_bf16().
enum class Operands { f32, bf16_to_f32, bf16_to_bf16 };
using Key = std::tuple<int, int, int, bool, bool, bool, bool, int, int64_t, int64_t, int64_t, Operands>;

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
  std::string impl;         // the implementation oneDNN chose (impl_info_str), e.g. "brg:avx512_core_bf16"
  memory::desc scratchpad;  // the user-managed scratchpad (bf16 primitives; empty for fp32)
};

// Row-major [rows, cols] stored either as is or transposed ([cols, rows] in memory), rows (or columns)
// `ld` elements apart.
memory::desc matrix_desc(int rows, int cols, bool transposed, int64_t ld,
                         memory::data_type type = memory::data_type::f32) {
  Dims strides = transposed ? Dims{1, ld} : Dims{ld, 1};
  return memory::desc(Dims{rows, cols}, type, strides);
}

Entry build(const Key& key) {
  auto [M, N, K, trans_a, trans_b, accumulate, has_bias, threads, lda, ldb, ldc, operands] = key;
  (void)threads;
  using dt = memory::data_type;
  const dt src = operands == Operands::f32 ? dt::f32 : dt::bf16;
  const dt dst = operands == Operands::bf16_to_bf16 ? dt::bf16 : dt::f32;
  Entry e;
  e.a = matrix_desc(M, K, trans_a, lda, src);  // op(A) [M, K]
  e.b = matrix_desc(K, N, trans_b, ldb, src);  // op(B) [K, N]
  e.c = matrix_desc(M, N, false, ldc, dst);
  e.bias = memory::desc(Dims{1, N}, memory::data_type::f32, Dims{N, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    // C = A B (+ bias) + 1.0 * C_old: the sum post-op reads dst before it is overwritten.
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  // bf16 primitives take their scratchpad from the caller (§5.2: no allocation per call, and the bytes
  // are countable); the fp32 ones keep oneDNN's own, as they always had.
  if (operands != Operands::f32) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto desc = has_bias ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c) : dnnl::matmul::desc(e.a, e.b, e.c);
  const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
  e.impl = pd.impl_info_str();
  if (operands != Operands::f32) e.scratchpad = pd.scratchpad_desc();
  e.prim = dnnl::matmul(pd);
  return e;
}

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<Key, Entry>& cache() {  // std::map: references stay valid as it grows
  static std::map<Key, Entry> entries;
  return entries;
}

const Entry& cached(const Key& key) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = cache().find(key);
  if (it == cache().end()) it = cache().emplace(key, build(key)).first;
  return it->second;
}

// The largest bf16 scratchpad any call took (gemm_bf16_scratchpad_bytes: the bytes are countable).
std::atomic<uint64_t> largest_scratchpad{0};
void note_scratchpad(uint64_t bytes) {
  uint64_t seen = largest_scratchpad.load();
  while (seen < bytes && !largest_scratchpad.compare_exchange_weak(seen, bytes)) {
  }
}

// The leading dimensions of A and C (0: dense), checked against the sizes; `name` is the caller's.
struct RowStrides {
  int64_t a, c;
};
RowStrides checked_row_strides(const char* name, int M, int N, int K, bool trans_a, GemmLd ld) {
  ODY_CHECK(M >= 0 && N >= 0 && K >= 0, "{}: negative size M={} N={} K={}", name, M, N, K);
  const RowStrides s{ld.a > 0 ? ld.a : (trans_a ? M : K), ld.c > 0 ? ld.c : N};
  ODY_CHECK(s.a >= (trans_a ? M : K) && s.c >= N,
            "{}: row strides lda={} ldc={} narrower than M={} N={} K={}", name, s.a, s.c, M, N, K);
  return s;
}

// Runs the cached primitive of `key` on the caller's operands (scratchpad: the user-managed one of the
// bf16 primitives, else null); oneDNN's errors become odyssey::Error naming `name` and the shape.
template <class In, class Out>
void execute(const char* name, const Key& key, Out* C, const In* A, const In* B, const float* bias,
             std::vector<uint8_t>* scratchpad) {
  const auto& [M, N, K, trans_a, trans_b, accumulate, has_bias, threads, lda, ldb, ldc, operands] = key;
  (void)accumulate, (void)has_bias, (void)threads, (void)lda, (void)ldb, (void)ldc, (void)operands;
  try {
    const Entry& e = cached(key);
    auto& engine = cpu_engine();
    // oneDNN takes non-const handles; inputs are only read.
    memory a(e.a, engine, const_cast<In*>(A));
    memory b(e.b, engine, const_cast<In*>(B));
    memory c(e.c, engine, C);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, engine, const_cast<float*>(bias)));
    if (scratchpad) {
      const size_t pad_bytes = e.scratchpad.get_size();
      if (scratchpad->size() < pad_bytes) scratchpad->resize(pad_bytes);
      note_scratchpad(pad_bytes);
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(e.scratchpad, engine, scratchpad->data()));
    }
    e.prim.execute(cpu_stream(), args);
    cpu_stream().wait();
  } catch (const dnnl::error& err) {
    fail("{} M={} N={} K={} trans_a={} trans_b={}: oneDNN error: {}", name, M, N, K, trans_a, trans_b,
         err.what());
  }
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
  const auto [lda, ldc] = checked_row_strides("gemm", M, N, K, trans_a, ld);
  if (M == 0 || N == 0) return;
  if (K == 0) return gemm_empty_k(C, ldc, bias, M, N, accumulate);
  const bool pad = pads_b(M, N, K, trans_a, trans_b);
  const int ldb = pad ? N + kPadFloats : (trans_b ? K : N);
  if (pad) B = padded_copy(B, K, N, ldb);
  Key key{M,   N,   K,   trans_a,      trans_b, accumulate, bias != nullptr, omp_get_max_threads(),
          lda, ldb, ldc, Operands::f32};
  execute<float, float>("gemm", key, C, A, B, bias, nullptr);
}

namespace {

// oneDNN 2.6.3 creates bf16 matmuls only with AVX-512 (§5.1): asked once, with a small problem.
bool probe_native_bf16() {
  try {
    build(Key{16, 16, 16, false, false, false, false, 1, 16, 16, 16, Operands::bf16_to_f32});
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// The calling thread's scratch: the fallback's fp32 operands and the native primitives' scratchpad.
struct Bf16Scratch {
  std::vector<float> a, b, c;
  std::vector<uint8_t> pad;
};
Bf16Scratch& bf16_scratch() {
  thread_local Bf16Scratch scratch;
  return scratch;
}

// A stored [rows, cols] bf16 matrix, rows ld apart, widened into dst [rows, cols] (dense; exact).
void widen_rows(const bf16* src, int rows, int cols, int64_t ld, float* dst) {
  const auto widen = bf16_convert_path().widen;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) widen(src + r * ld, dst + size_t(r) * size_t(cols), size_t(cols));
}
// dst [rows, cols] rows ld apart = RNE(src [rows, cols] dense).
void round_rows(const float* src, int rows, int cols, int64_t ld, bf16* dst) {
  const auto nearest = bf16_convert_path().nearest;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) nearest(src + size_t(r) * size_t(cols), dst + r * ld, size_t(cols));
}

void announce_fallback() {
  static std::once_flag once;
  std::call_once(once, [] {
    log_info(
        "bf16 GEMM: oneDNN creates no bf16 matmul on this CPU ({}, oneDNN ISA {}): bf16 storage, fp32 "
        "compute (mixed-precision.md 5.5); no bf16 speed is claimed here",
        cpu_info().model, onednn_isa());
  });
}

// §5.5: the bf16 operands widened to fp32 scratch and the fp32 GEMM run on them; the same dst semantics
// (a bf16 dst is computed in fp32, with its old value when accumulating, and rounded once).
template <class Dst>
void fallback(Dst* C, const bf16* A, const bf16* B, const float* bias, int M, int N, int K, bool trans_a,
              bool trans_b, bool accumulate, int64_t lda, int64_t ldc) {
  Bf16Scratch& s = bf16_scratch();
  const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  s.a.resize(size_t(a_rows) * size_t(a_cols));
  s.b.resize(size_t(K) * size_t(N));
  widen_rows(A, a_rows, a_cols, lda, s.a.data());
  widen_rows(B, trans_b ? N : K, trans_b ? K : N, trans_b ? K : N, s.b.data());
  if constexpr (std::is_same_v<Dst, float>) {
    gemm(C, s.a.data(), s.b.data(), bias, M, N, K, trans_a, trans_b, accumulate, GemmLd{0, ldc});
  } else {
    s.c.resize(size_t(M) * size_t(N));
    if (accumulate) widen_rows(C, M, N, ldc, s.c.data());
    gemm(s.c.data(), s.a.data(), s.b.data(), bias, M, N, K, trans_a, trans_b, accumulate);
    round_rows(s.c.data(), M, N, ldc, C);
  }
}

template <class Dst>
void gemm_bf16_any(Dst* C, const bf16* A, const bf16* B, const float* bias, int M, int N, int K, bool trans_a,
                   bool trans_b, bool accumulate, GemmLd ld) {
  const auto [lda, ldc] = checked_row_strides("gemm_bf16", M, N, K, trans_a, ld);
  if (M == 0 || N == 0) return;
  if (K == 0 || !gemm_bf16_native()) {  // oneDNN is not asked about empty reductions
    if (!gemm_bf16_native()) announce_fallback();
    return fallback(C, A, B, bias, M, N, K, trans_a, trans_b, accumulate, lda, ldc);
  }
  constexpr Operands operands = std::is_same_v<Dst, float> ? Operands::bf16_to_f32 : Operands::bf16_to_bf16;
  const int64_t ldb = trans_b ? K : N;
  Key key{M,   N,   K,   trans_a, trans_b, accumulate, bias != nullptr, omp_get_max_threads(),
          lda, ldb, ldc, operands};
  execute<bf16, Dst>("gemm_bf16", key, C, A, B, bias, &bf16_scratch().pad);
}

}  // namespace

bool gemm_bf16_native() {
  static const bool native = probe_native_bf16();
  return native;
}

void gemm_bf16(float* C, const bf16* A, const bf16* B, const float* bias, int M, int N, int K, bool trans_a,
               bool trans_b, bool accumulate, GemmLd ld) {
  gemm_bf16_any(C, A, B, bias, M, N, K, trans_a, trans_b, accumulate, ld);
}

void gemm_bf16(bf16* C, const bf16* A, const bf16* B, const float* bias, int M, int N, int K, bool trans_a,
               bool trans_b, bool accumulate, GemmLd ld) {
  gemm_bf16_any(C, A, B, bias, M, N, K, trans_a, trans_b, accumulate, ld);
}

std::string gemm_bf16_implementation(int M, int N, int K, bool trans_a, bool trans_b, bool accumulate,
                                     bool bias, bool dst_bf16, GemmLd ld) {
  if (!gemm_bf16_native() || M <= 0 || N <= 0 || K <= 0) return "fallback";
  const int64_t lda = ld.a > 0 ? ld.a : (trans_a ? M : K), ldc = ld.c > 0 ? ld.c : N;
  const Key key{M,       N,
                K,       trans_a,
                trans_b, accumulate,
                bias,    omp_get_max_threads(),
                lda,     trans_b ? K : N,
                ldc,     dst_bf16 ? Operands::bf16_to_bf16 : Operands::bf16_to_f32};
  return cached(key).impl;
}

std::vector<std::string> gemm_bf16_primitives() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  std::vector<std::string> lines;
  for (const auto& [key, entry] : cache()) {
    const auto& [M, N, K, trans_a, trans_b, accumulate, has_bias, threads, lda, ldb, ldc, operands] = key;
    if (operands == Operands::f32) continue;
    lines.push_back(fmt::format("{}x{}x{} trans_a={} trans_b={} acc={} bias={} dst={} threads={}: {}", M, N,
                                K, trans_a, trans_b, accumulate, has_bias,
                                operands == Operands::bf16_to_bf16 ? "bf16" : "f32", threads, entry.impl));
  }
  return lines;
}

uint64_t gemm_bf16_scratchpad_bytes() {
  return largest_scratchpad.load();
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
