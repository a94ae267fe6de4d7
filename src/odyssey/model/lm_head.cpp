#include "odyssey/model/lm_head.h"

#include <algorithm>
#include <cstddef>

#include "odyssey/core/error.h"

namespace odyssey {

void lm_head_loss(const LmHeadArgs& a, LinearOps& linears, VocabOps& vocab, OpObserver* o) {
  ODY_CHECK(a.chunk > 0, "LM head: chunk of {} rows", a.chunk);
  const bool train = a.dloss > 0;
  const int C = a.C;
  const int64_t R = linears.rows(a.N), G = a.N / R, Vr = vocab.rows(a.V);
  // Under TP-SP the gathered rows are rank q's rows [r0, r0 + m) of its slice, the tokens tp_sp_token
  // gives them.
  std::vector<int> targets(G > 1 ? size_t(a.chunk * G) : 0);
  std::vector<float> losses(targets.size());
  for (int64_t r0 = 0; r0 < R; r0 += a.chunk) {
    const int64_t m = std::min<int64_t>(a.chunk, R - r0), n = m * G;
    const float* x = a.x + size_t(r0) * C;
    const int* t = a.targets + r0;
    float* loss = a.losses + r0;
    if (G > 1) {
      for (int64_t k = 0; k < n; ++k)
        targets[size_t(k)] = a.targets[tp_sp_token(a.N, int(G), int(k / m), r0 + k % m, a.layer_chunk)];
      t = targets.data(), loss = losses.data();
    }
    const LinearCall call{n, C, int(Vr), "lm_head", o};
    linears.column_forward(a.block, x, a.w, nullptr, call);
    vocab.cross_entropy(loss, a.block, t, n, a.V, train ? a.dloss : 0.0f, o);
    if (G > 1)
      for (int64_t k = 0; k < n; ++k)
        a.losses[tp_sp_token(a.N, int(G), int(k / m), r0 + k % m, a.layer_chunk)] = losses[size_t(k)];
    if (train) linears.column_backward(a.dx + size_t(r0) * C, a.dw, nullptr, a.block, x, a.w, call);
  }
}

}  // namespace odyssey
