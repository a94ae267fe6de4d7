// What a layer's backward reruns before back-propagating, because its checkpoint policy dropped it
// (model/layer_loop.h decides, the blocks obey). Every rerun issues the forward's own calls over the
// same row chunks, so it reproduces the forward's bits.
#pragma once

namespace odyssey {

struct Recompute {
  bool qkv = false;          // the input norm and the qkv projection (and RoPE), over every chunk
  bool attention = false;    // the attention forward (out, lse, what the op saves)
  bool token_local = false;  // per chunk, just before its backward: the rest of the token-local forward
  bool cheap = false;        // per chunk: only the norm outputs and the MLP activation (policy cheap)
};

}  // namespace odyssey
