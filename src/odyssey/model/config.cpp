#include "odyssey/model/config.h"

#include <limits>

#include "odyssey/core/checked_int.h"
#include "odyssey/core/error.h"

namespace odyssey {

// The rules every architecture shares; an architecture's own are its registry entry's
// (validate_model, model/architecture.h).
void ModelConfig::validate() const {
  ODY_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  // Cheap bounds before any per-layer work (parameter tables, stages): a dry run answers at once.
  ODY_CHECK(n_layer <= kMaxLayers,
            "model.n_layer ({}) is more than the {} layers Odyssey builds (the deepest published "
            "transformers have about 1,000)",
            n_layer, kMaxLayers);
  ODY_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  ODY_CHECK(d_model > 0, "model.d_model must be positive, got {}", d_model);
  ODY_CHECK(seq_len > 0, "model.seq_len must be positive, got {}", seq_len);
  // No upper bound: the token-shard format carries the width (uint32 shards above 65,536 ids).
  ODY_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
  // The kernels index a row of every activation with int: the attention's q, k and v heads side by side
  // and the MLP's two projections (SwiGLU's gate and up) must fit.
  constexpr int64_t kMaxWidth = std::numeric_limits<int>::max();
  const int64_t heads = checked_add(n_head, checked_mul(2, kv_heads(), "model.n_kv_head"), "model.n_head");
  const int64_t qkv = checked_mul(heads, head_dim(), "(model.n_head + 2 x model.n_kv_head) x model.head_dim");
  ODY_CHECK(
      qkv <= kMaxWidth,
      "(model.n_head {} + 2 x model.n_kv_head {}) x model.head_dim {} = {}: the attention's width must be "
      "at most {}",
      n_head, kv_heads(), head_dim(), qkv, kMaxWidth);
  // ffn_dim() in 64 bits: a derived width (4 x model.d_model) may not fit an int before this check.
  const int64_t ffn = d_ff > 0 ? int64_t(d_ff) : 4 * int64_t(d_model);
  ODY_CHECK(2 * ffn <= kMaxWidth, "{} ({}): twice the MLP width must be at most {}",
            d_ff > 0 ? "model.d_ff" : "4 x model.d_model (model.d_ff unset)", ffn, kMaxWidth);
}

}  // namespace odyssey
