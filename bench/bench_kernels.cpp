// Kernel throughput on GPT-2 124M shapes, printed as one JSON object on stdout:
//   gemm: GFLOP/s of every linear layer's forward and two backward GEMMs at M = 1024 rows, each also
//   with the padded-B copy off ("gflops_no_pad": ODYSSEY_GEMM_PAD_B=0; the same where it never pads);
//   the LM head (50257 x 768) twice: out / dout rows dense ("ld_out": 50257) and padded as the head's
//   logits block has them (logits_row_stride: 50272);
//   gemm_bf16_vs_f32: oneDNN's matmul with bf16 inputs and f32 output against f32, same shapes at M =
//   1024 (and 1024^3), same run: what bf16 linears would gain on this CPU;
//   gemm_bf16_engine: the engine's gemm_bf16 (kernels/gemm.h) against its gemm on the linears' forward
//   shapes, with the implementation it ran ("fallback" where oneDNN has no bf16 matmul: there the
//   figure is the fallback's cost, never a bf16 speed-up);
//   bf16_convert: fp32 -> bf16 RNE and SR and bf16 -> fp32, 32M elements, every path this CPU runs on
//   one thread, and the bulk functions on all threads; elements/s and GB/s (6 bytes per element);
//   adamw: ms per update of GPT-2 124M's parameters, and its reference's (optim/adamw.h);
//   layernorm, gelu, cross-entropy: GB/s counting the minimum traffic (each input read once, each
//   output written once), so cache-resident re-reads inside a kernel do not inflate the figure.
// Usage: bench_kernels [seconds per measurement, default 0.5] [--bf16: only the three bf16 sections].
// Threads follow OMP_NUM_THREADS.
#include <fmt/format.h>
#include <omp.h>
#include <dnnl.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "odyssey/core/bf16.h"
#include "odyssey/core/timer.h"
#include "odyssey/kernels/bf16_convert.h"
#include "odyssey/kernels/cpu_info.h"
#include "odyssey/kernels/cross_entropy.h"
#include "odyssey/kernels/gelu.h"
#include "odyssey/kernels/gemm.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/model/lm_head.h"
#include "odyssey/optim/adamw.h"

#include "odyssey/train/host_info.h"

using namespace odyssey;

namespace {

double g_seconds = 0.5;

// Mean seconds per call, after one untimed warm-up call (primitive creation, page faults).
template <typename F>
double time_per_call(F&& f) {
  f();
  Timer timer;
  int calls = 0;
  do {
    f();
    ++calls;
  } while (timer.seconds() < g_seconds || calls < 3);
  return timer.seconds() / calls;
}

std::vector<float> filled(size_t n, float value) {
  return std::vector<float>(n, value);
}

// One linear layer of width (N out, K in) at M rows: out = in W^T, dinp = dout W, dW = dout^T in; out
// and dout rows ld_out floats apart.
void bench_linear_gemms(std::vector<std::string>& rows, int M, int N, int K, int64_t ld_out) {
  auto in = filled(static_cast<size_t>(M) * K, 0.01f), w = filled(static_cast<size_t>(N) * K, 0.01f);
  auto out = filled(size_t(M) * size_t(ld_out), 0.0f), bias = filled(N, 0.0f);
  auto dinp = filled(static_cast<size_t>(M) * K, 0.0f), dw = filled(static_cast<size_t>(N) * K, 0.0f);
  const double flops = 2.0 * M * N * static_cast<double>(K);
  struct Form {
    const char* name;
    int m, n, k;
    bool ta, tb;
    float *c, *a, *b, *bias;
    GemmLd ld;
  };
  const Form forms[] = {
      {"forward", M, N, K, false, true, out.data(), in.data(), w.data(), bias.data(), {.c = ld_out}},
      {"backward_input", M, K, N, false, false, dinp.data(), out.data(), w.data(), nullptr, {.a = ld_out}},
      {"backward_weight", N, K, M, true, false, dw.data(), out.data(), in.data(), nullptr, {.a = ld_out}},
  };
  for (const Form& f : forms) {
    auto call = [&] { gemm(f.c, f.a, f.b, f.bias, f.m, f.n, f.k, f.ta, f.tb, f.bias == nullptr, f.ld); };
    const double seconds = time_per_call(call);
    set_gemm_pad_b(false);
    const double no_pad = time_per_call(call);
    set_gemm_pad_b(true);
    rows.push_back(fmt::format(
        R"({{"layer": "{}x{}", "form": "{}", "M": {}, "N": {}, "K": {}, "trans_a": {}, "trans_b": {}, "ld_out": {}, "ms": {:.3f}, "gflops": {:.1f}, "gflops_no_pad": {:.1f}}})",
        N, K, f.name, f.m, f.n, f.k, f.ta, f.tb, ld_out, seconds * 1e3, flops / seconds / 1e9,
        flops / no_pad / 1e9));
  }
}

// What bf16 GEMMs give the linears (mixed-precision.md), measured on oneDNN directly: its
// matmul out [M, N] f32 = in [M, K] x W^T with in and W in bf16, against the same matmul in f32 in the
// same run. Where oneDNN has no bf16 primitives (oneDNN 2.6.3 without AVX-512) bf16_gflops says so.
std::string bench_bf16_gemm(int M, int N, int K) {
  using dnnl::memory;
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  static dnnl::stream stream(eng);
  auto rate = [&](memory::data_type in_type) {
    const memory::desc a({M, K}, in_type, memory::format_tag::ab), w({K, N}, in_type, memory::format_tag::ba),
        c({M, N}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, w, c), eng);
    memory A(a, eng), W(w, eng), C(c, eng);
    std::memset(A.get_data_handle(), 0x3c, a.get_size());  // 0x3c3c...: a small positive value in both types
    std::memset(W.get_data_handle(), 0x3c, w.get_size());
    const dnnl::matmul mm(pd);
    const std::unordered_map<int, memory> args{{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, W}, {DNNL_ARG_DST, C}};
    const double seconds = time_per_call([&] {
      mm.execute(stream, args);
      stream.wait();
    });
    return 2.0 * M * N * double(K) / seconds / 1e9;
  };
  const double f32 = rate(memory::data_type::f32);
  try {
    const double bf16 = rate(memory::data_type::bf16);
    return fmt::format(
        R"({{"M": {}, "N": {}, "K": {}, "f32_gflops": {:.1f}, "bf16_gflops": {:.1f}, "ratio": {:.2f}}})", M,
        N, K, f32, bf16, bf16 / f32);
  } catch (const dnnl::error& e) {
    return fmt::format(R"({{"M": {}, "N": {}, "K": {}, "f32_gflops": {:.1f}, "bf16_gflops": {}}})", M, N, K,
                       f32, nlohmann::json(std::string("unavailable: ") + e.what()).dump());
  }
}

double gbps(double bytes, double seconds) {
  return bytes / seconds / 1e9;
}

// gemm_bf16 (bf16 in, f32 out) against gemm (f32) on out [M, N] = in [M, K] W^T, same run.
std::string bench_engine_bf16_gemm(int M, int N, int K) {
  auto in = filled(size_t(M) * K, 0.01f), w = filled(size_t(N) * K, 0.01f), out = filled(size_t(M) * N, 0.0f);
  std::vector<bf16> in_b(in.size(), to_bf16(0.01f)), w_b(w.size(), to_bf16(0.01f));
  const double flops = 2.0 * M * N * double(K);
  const double f32 =
      time_per_call([&] { gemm(out.data(), in.data(), w.data(), nullptr, M, N, K, false, true, false); });
  const double b16 = time_per_call(
      [&] { gemm_bf16(out.data(), in_b.data(), w_b.data(), nullptr, M, N, K, false, true, false); });
  return fmt::format(
      R"({{"M": {}, "N": {}, "K": {}, "implementation": "{}", "f32_gflops": {:.1f}, "bf16_gflops": {:.1f}, "ratio": {:.2f}}})",
      M, N, K, gemm_bf16_implementation(M, N, K, false, true, false, false, false), flops / f32 / 1e9,
      flops / b16 / 1e9, f32 / b16);
}

// One JSON row per conversion: single-thread per path, then the bulk functions on all threads.
std::vector<std::string> bench_bf16_convert() {
  const size_t n = size_t{32} << 20;
  std::vector<float> x(n), back(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(int(i % 2003) - 1001) * 0.37f;
  std::vector<bf16> y(n);
  const Bf16RoundingKey key{.seed = 1, .step = 2, .purpose = 3, .tensor = 4};
  std::vector<std::string> rows;
  auto row = [&](const std::string& path, int threads, const char* what, double seconds) {
    rows.push_back(fmt::format(
        R"({{"path": "{}", "threads": {}, "conversion": "{}", "elements": {}, "gelem_per_s": {:.2f}, "gbps": {:.1f}}})",
        path, threads, what, n, double(n) / seconds / 1e9, gbps(6.0 * double(n), seconds)));
  };
  for (const Bf16ConvertPathSupport& p : bf16_convert_paths()) {
    if (!p.runs_here) continue;
    row(p.path->name, 1, "nearest", time_per_call([&] { p.path->nearest(x.data(), y.data(), n); }));
    row(p.path->name, 1, "stochastic",
        time_per_call([&] { p.path->stochastic(x.data(), y.data(), n, key); }));
    row(p.path->name, 1, "widen", time_per_call([&] { p.path->widen(y.data(), back.data(), n); }));
  }
  const int threads = omp_get_max_threads();
  const std::string bulk = std::string("bulk:") + bf16_convert_path().name;
  row(bulk, threads, "nearest", time_per_call([&] { convert_to_bf16(x.data(), y.data(), n); }));
  row(bulk, threads, "stochastic",
      time_per_call([&] { convert_to_bf16_stochastic(x.data(), y.data(), n, key); }));
  row(bulk, threads, "widen", time_per_call([&] { convert_to_float(y.data(), back.data(), n); }));
  return rows;
}

// What the bf16 figures ran on (mixed-precision.md §2, §5.5): "bf16_gemm": "native" or "fallback" (no
// bf16 speed is claimed on the fallback), the conversion path, and whether the CPU has AVX512_BF16.
std::string bf16_host_fields() {
  return fmt::format(R"("bf16_gemm": "{}", "bf16_convert_path": "{}", "avx512_bf16": {})",
                     gemm_bf16_native() ? "native" : "fallback", bf16_convert_path().name,
                     cpu_info().avx512_bf16);
}

void print_rows(const char* name, const std::vector<std::string>& rows, bool last = false) {
  fmt::print("  \"{}\": [\n", name);
  for (size_t i = 0; i < rows.size(); ++i) fmt::print("    {}{}\n", rows[i], i + 1 < rows.size() ? "," : "");
  fmt::print("  ]{}\n", last ? "" : ",");
}

}  // namespace

int main(int argc, char** argv) {
  bool bf16_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--bf16")
      bf16_only = true;
    else
      g_seconds = std::atof(argv[i]);
  }
  const int M = 1024, C = 768;
  std::vector<std::string> bf16_rows, engine_rows;
  for (auto [N, K] : {std::pair{1024, 1024}, {2304, 768}, {3072, 768}, {768, 3072}, {50257, 768}}) {
    bf16_rows.push_back(bench_bf16_gemm(M, N, K));
    engine_rows.push_back(bench_engine_bf16_gemm(M, N, K));
  }
  const std::vector<std::string> convert_rows = bench_bf16_convert();
  if (bf16_only) {
    fmt::print("{{\n  \"host\": {},\n  \"threads\": {},\n  {},\n", odyssey::host_json().dump(),
               omp_get_max_threads(), bf16_host_fields());
    print_rows("gemm_bf16_vs_f32", bf16_rows);
    print_rows("gemm_bf16_engine", engine_rows);
    print_rows("bf16_convert", convert_rows, true);
    fmt::print("}}\n");
    return 0;
  }
  std::vector<std::string> gemm_rows;
  for (auto [N, K] : {std::pair{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}, {50257, 768}})
    bench_linear_gemms(gemm_rows, M, N, K, N);
  bench_linear_gemms(gemm_rows, M, 50257, 768, logits_row_stride(50257));  // as the LM head runs
  const double square = measure_gemm_gflops(1024, g_seconds);

  // LayerNorm and GELU at B = 8, T = 1024 rows, so the arrays exceed the caches.
  const int rows = 8 * 1024;
  const size_t nc = static_cast<size_t>(rows) * C;
  auto x = filled(nc, 0.5f), y = filled(nc, 0.0f), dx = filled(nc, 0.0f), dy = filled(nc, 0.01f);
  auto w = filled(C, 1.0f), b = filled(C, 0.0f), dw = filled(C, 0.0f), db = filled(C, 0.0f);
  auto mean = filled(rows, 0.0f), rstd = filled(rows, 0.0f);
  for (size_t i = 0; i < nc; ++i) x[i] = static_cast<float>(i % 97) * 0.01f;
  const double ln_fwd = time_per_call(
      [&] { layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C); });
  const double ln_bwd = time_per_call([&] {
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                       rstd.data(), rows, C);
  });

  const size_t ng = nc * 4;  // the MLP's hidden activation [B*T, 4C]
  auto gx = filled(ng, 0.3f), gy = filled(ng, 0.0f), gdx = filled(ng, 0.0f), gdy = filled(ng, 0.01f);
  const double gelu_fwd = time_per_call([&] { gelu_forward(gy.data(), gx.data(), ng); });
  const double gelu_bwd = time_per_call([&] { gelu_backward(gdx.data(), gx.data(), gdy.data(), ng); });

  // Cross-entropy over GPT-2's vocabulary, M = 1024 rows. The fused call overwrites its input with
  // gradients; later calls run on those (still finite) values, which costs the same.
  const int V = 50257;
  const size_t nv = static_cast<size_t>(M) * V;
  auto logits = filled(nv, 0.0f), losses = filled(M, 0.0f);
  for (size_t i = 0; i < nv; ++i) logits[i] = static_cast<float>(i % 1009) * 0.01f;
  std::vector<int> targets(M);
  for (int i = 0; i < M; ++i) targets[i] = (i * 7919) % V;
  const double ce_fwd =
      time_per_call([&] { cross_entropy_forward(losses.data(), logits.data(), targets.data(), M, V); });
  const double ce_fb = time_per_call(
      [&] { cross_entropy_forward_backward(logits.data(), losses.data(), targets.data(), M, V, 1.0f / M); });

  // AdamW over GPT-2 124M's parameters: the update and its reference (the bias corrections divided per
  // element). The logits and GELU arrays are freed first: these four are 2 GB.
  std::vector<float>().swap(logits), std::vector<float>().swap(gx), std::vector<float>().swap(gy);
  std::vector<float>().swap(gdx), std::vector<float>().swap(gdy);
  const size_t np = 124439808;
  auto ap = filled(np, 0.01f), ag = filled(np, 1e-3f), am = filled(np, 1e-4f), av = filled(np, 1e-6f);
  const AdamWConfig adam;
  int64_t adam_step = 1;
  const double adamw = time_per_call([&] {
    adamw_update(ap.data(), ag.data(), am.data(), av.data(), np, adam, adam.lr, adam_step++, 1.0f, true);
  });
  const double adamw_ref = time_per_call([&] {
    adamw_update_reference(ap.data(), ag.data(), am.data(), av.data(), np, adam, adam.lr, adam_step++, 1.0f,
                           true);
  });

  fmt::print(
      "{{\n  \"host\": {},\n  \"threads\": {},\n  {},\n  \"gemm_square_1024_gflops\": {:.1f},\n  \"gemm\": "
      "[\n",
      odyssey::host_json().dump(), omp_get_max_threads(), bf16_host_fields(), square);
  for (size_t i = 0; i < gemm_rows.size(); ++i)
    fmt::print("    {}{}\n", gemm_rows[i], i + 1 < gemm_rows.size() ? "," : "");
  fmt::print("  ],\n");
  print_rows("gemm_bf16_vs_f32", bf16_rows);
  print_rows("gemm_bf16_engine", engine_rows);
  print_rows("bf16_convert", convert_rows);
  auto line = [](const char* name, const char* shape, double seconds, double bytes, bool last = false) {
    fmt::print(R"(  "{}": {{"shape": "{}", "ms": {:.3f}, "gbps": {:.1f}}}{})"
               "\n",
               name, shape, seconds * 1e3, gbps(bytes, seconds), last ? "" : ",");
  };
  line("layernorm_forward", "8192x768", ln_fwd, 4.0 * (2.0 * nc + 2.0 * rows));  // x in, out + mean/rstd out
  line("layernorm_backward", "8192x768", ln_bwd,
       4.0 * (4.0 * nc + 2.0 * rows));  // dout, x, dinp in; dinp out
  line("gelu_forward", "8192x3072", gelu_fwd, 4.0 * 2.0 * ng);
  line("gelu_backward", "8192x3072", gelu_bwd, 3.0 * 4.0 * ng);  // inp, dout in; dinp out
  line("cross_entropy_forward", "1024x50257", ce_fwd, 4.0 * nv);
  line("cross_entropy_forward_backward", "1024x50257", ce_fb, 4.0 * 2.0 * nv);  // logits in, grads out
  // params, grads, m, v in; params, m, v out
  fmt::print(R"(  "adamw": {{"params": {}, "ms": {:.3f}, "gbps": {:.1f}, "reference_ms": {:.3f}}})"
             "\n",
             np, adamw * 1e3, gbps(28.0 * double(np), adamw), adamw_ref * 1e3);
  fmt::print("}}\n");
  return 0;
}
