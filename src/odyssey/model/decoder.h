// Forward-only incremental inference, what the KV cache (kv_cache.h) asks of an architecture: run T
// tokens at given positions through every layer of the whole model, layer l attending through
// attention[l] (the cache's op, which keeps that layer's keys and values), then the final norm and the
// LM head on the last token only. Each architecture's stage makes its own (Stage::make_decoder) from
// its block, so the cache computes exactly what the stage's forward computes.
#pragma once

#include <cstddef>

#include "odyssey/model/attention_op.h"

namespace odyssey {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Logits [V] of the last of the T tokens (T <= the max_tokens it was made for), valid until the next
  // call. Parameters are read through the stage at every call.
  virtual const float* run(const int* tokens, const int* positions, int T, AttentionOp* const* attention) = 0;
  virtual size_t bytes() const = 0;
};

}  // namespace odyssey
