#include "odyssey/model/config.h"

#include "odyssey/core/error.h"

namespace odyssey {

// The rules every architecture shares; an architecture's own are its registry entry's
// (validate_model, model/architecture.h).
void ModelConfig::validate() const {
  ODY_CHECK(n_layer > 0, "model.n_layer must be positive, got {}", n_layer);
  ODY_CHECK(n_head > 0, "model.n_head must be positive, got {}", n_head);
  ODY_CHECK(d_model > 0, "model.d_model must be positive, got {}", d_model);
  ODY_CHECK(seq_len > 0, "model.seq_len must be positive, got {}", seq_len);
  // No upper bound: the token-shard format carries the width (uint32 shards above 65,536 ids).
  ODY_CHECK(vocab_size > 0, "model.vocab_size must be positive, got {}", vocab_size);
}

}  // namespace odyssey
