#include "odyssey/model/lm_head.h"

#include <algorithm>
#include <cstddef>

#include "odyssey/core/error.h"
#include "odyssey/kernels/layernorm.h"
#include "odyssey/kernels/rmsnorm.h"

namespace odyssey {

namespace {

// n = norm(x) for m rows (the chunk buffers of f).
void norm_forward(const FinalNorm& f, int64_t m, int C, OpObserver* o) {
  if (f.bias)
    observed(o, "layernorm.fwd", 0,
             [&] { layernorm_forward(f.n, f.mean, f.rstd, f.x, f.weight, f.bias, int(m), C, f.eps); });
  else
    observed(o, "rmsnorm.fwd", 0, [&] { rmsnorm_forward(f.n, f.rstd, f.x, f.weight, int(m), C, f.eps); });
}

// dx [m, C] = d(norm input) from f.dn, the weight gradients summed in f.sums.
void norm_backward(float* dx, const FinalNorm& f, int64_t m, int C, OpObserver* o) {
  std::fill(dx, dx + size_t(m) * C, 0.0f);
  if (f.bias)
    observed(o, "layernorm.bwd", 0,
             [&] { layernorm_backward_rows(dx, *f.sums, f.dn, f.x, f.weight, f.mean, f.rstd, int(m), C); });
  else
    observed(o, "rmsnorm.bwd", 0,
             [&] { rmsnorm_backward_rows(dx, *f.sums, f.dn, f.x, f.weight, f.rstd, int(m), C); });
}

}  // namespace

void lm_head_loss(const LmHeadArgs& a, LinearOps& linears, VocabOps& vocab, OpObserver* o) {
  ODY_CHECK(a.chunk > 0, "LM head: chunk of {} rows", a.chunk);
  const bool train = a.dloss > 0;
  ODY_CHECK(!train || a.norm.sums, "LM head: training without the final norm's gradient sums");
  if (train) a.norm.sums->reset(a.norm.sums->width());  // this loss's gradient only
  const int C = a.C;
  const int64_t R = linears.rows(a.N), G = a.N / R, Vr = vocab.rows(a.V);
  const int64_t ld = a.block_ld > 0 ? a.block_ld : logits_row_stride(Vr);
  ODY_CHECK(ld >= Vr, "LM head: logits rows {} floats apart, narrower than the {} vocabulary rows held", ld,
            Vr);
  // Under TP-SP the gathered rows are rank q's rows [r0, r0 + m) of its slice, the tokens tp_sp_token
  // gives them.
  std::vector<int> targets(G > 1 ? size_t(a.chunk * G) : 0);
  std::vector<float> losses(targets.size());
  for (int64_t r0 = 0; r0 < R; r0 += a.chunk) {
    const int64_t m = std::min<int64_t>(a.chunk, R - r0), n = m * G;
    const FinalNorm& f = a.norm;
    std::copy(a.x + size_t(r0) * C, a.x + size_t(r0 + m) * C, f.x);  // before dx overwrites it
    norm_forward(f, m, C, o);
    linears.store_activation(f.n, m, C);
    const float* x = f.n;
    const int* t = a.targets + r0;
    float* loss = a.losses + r0;
    if (G > 1) {
      for (int64_t k = 0; k < n; ++k)
        targets[size_t(k)] = a.targets[tp_sp_token(a.N, int(G), int(k / m), r0 + k % m, a.layer_chunk)];
      t = targets.data(), loss = losses.data();
    }
    const LinearCall call{n, C, int(Vr), "lm_head", o, ld};
    linears.column_forward(a.block, x, a.w, nullptr, call);
    vocab.cross_entropy(loss, a.block, ld, t, n, a.V, train ? a.dloss : 0.0f, o);
    if (G > 1)
      for (int64_t k = 0; k < n; ++k)
        a.losses[tp_sp_token(a.N, int(G), int(k / m), r0 + k % m, a.layer_chunk)] = losses[size_t(k)];
    if (!train) continue;
    linears.store_activation(a.block, n, Vr, ld);  // dlogits
    linears.column_backward(f.dn, a.dw, nullptr, a.block, x, a.w, call);
    norm_backward(a.dx + size_t(r0) * C, f, m, C, o);
  }
}

}  // namespace odyssey
