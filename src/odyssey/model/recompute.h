// What a layer's backward reruns before back-propagating, because its checkpoint policy dropped it
// (model/layer_loop.h decides, the blocks obey). Every rerun issues the forward's own calls over the
// same row chunks, so it reproduces the forward's bits.
#pragma once

#include <functional>

namespace odyssey {

struct Recompute {
  bool qkv = false;          // the input norm and the qkv projection (and RoPE), over every chunk
  bool attention = false;    // the attention forward (out, lse, what the op saves)
  bool token_local = false;  // per chunk, just before its backward: the rest of the token-local forward
  bool cheap = false;        // per chunk: only the norm outputs and the MLP activation (policy cheap)
  // Called with rows [r, r + n) of the layer's input once the backward will not read them again (after
  // their chunk's input-norm backward): the disk tier reads the layer below's input into them.
  std::function<void(int r, int n)> input_rows_done;
  void done_with_input(int r, int n) const {
    if (input_rows_done) input_rows_done(r, n);
  }
};

}  // namespace odyssey
