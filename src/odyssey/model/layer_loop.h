// The layer loop of a stage's forward and backward, with the activation-checkpointing policies
// (long-context-memory.md §2.2), written once for every architecture. `LayerActs` is the
// architecture's per-layer activations (residual3 the layer's output, atty and lse the attention's
// output and log-sum-exp, attention what the op saved); the block is passed as two callables:
//   fwd(acts, x, l): layer l's block forward from input x into acts;
//   bwd(acts, x, l, recompute): its backward, rerunning first what `recompute` says (model/recompute.h).
//
//   none            every layer keeps all its activations;
//   cheap           every layer keeps all but its norm outputs and MLP activation, which it recomputes
//                   chunk by chunk in its backward (into one chunk's buffers, borrowed from `work`);
//   keep_attention  a layer keeps its output, the attention's output, lse and saved tensors; the rest is
//                   recomputed in its backward, the attention not (the quadratic part);
//   full            a layer keeps its output only and is recomputed whole in its backward.
// Recomputation issues exactly the forward's calls, so every policy gives the bits of none. A
// recomputing policy's working layer holds the token-local activations of one row chunk
// (memory.chunk_tokens) and recomputes them chunk by chunk inside the backward.
//
// The disk tier (memory.tier = disk, keep_attention and full): the layer outputs (the next layers'
// inputs) live in two slots instead of one buffer per layer. Layer i writes its output into slot i % 2,
// which the I/O thread then writes to the scratch file (core/offload_file.h) while layer i + 1 reads it;
// layer i + 2 waits for that write before reusing the slot. The backward of layer i waits for its input
// (slot (i - 1) % 2: still there from the forward for the last layer, else read back) and starts the
// read of layer i - 1's input into slot i % 2, whose content (layer i's output) nobody needs any more.
// The last layer's output (the head's input) is never written. The same bytes come back, checksummed:
// the arithmetic, and so every bit, is the RAM tier's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "odyssey/core/buffer.h"
#include "odyssey/core/error.h"
#include "odyssey/core/offload_file.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/recompute.h"
#include "odyssey/model/row_chunks.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// What a micro-batch keeps of its layers, per policy.
template <typename LayerActs>
struct KeptLayers {
  CheckpointPolicy policy = CheckpointPolicy::none;
  std::vector<LayerActs> layers;  // none: everything; otherwise what the policy keeps
  LayerActs work;                 // recomputing policies: the one layer being run or recomputed
  int work_layer = -1;            // the layer whose activations `work` holds (-1: none)
  int chunks = 1;                 // row chunks per layer (work holds one of them)

  bool cheap() const { return policy == CheckpointPolicy::cheap; }
  // keep_attention and full: layers keep their output (and attention), `work` runs and reruns them.
  bool recomputes_layers() const { return keeps_layer_inputs(policy); }
  bool keeps_attention() const { return policy == CheckpointPolicy::keep_attention; }

  // Disk tier: the two resident layer outputs, which layer's output each holds (-1: none) and the
  // ticket of its last I/O request; the scratch file (null with fewer than two layers: nothing to write).
  MemoryTier tier = MemoryTier::ram;
  FloatBuffer slots[2];
  int slot_layer[2] = {-1, -1};
  uint64_t slot_ticket[2] = {0, 0};
  std::unique_ptr<OffloadFile> disk;
  std::string offload_dir;
  bool on_disk() const { return tier == MemoryTier::disk; }

  // Layer i's output (the stage's i-th layer; the next one's input). On disk: resident only while the
  // layer loops keep it so (the last layer's from its forward until the backward begins).
  const float* output(size_t i) const { return on_disk() ? slots[i % 2].data() : layers[i].residual3.data(); }
  FloatBuffer& output_buffer(size_t i) { return on_disk() ? slots[i % 2] : layers[i].residual3; }

  // Room for the outputs of the n layers of `floats` each that a recomputing policy keeps: in RAM per
  // layer, or in two slots and a scratch file in memory.offload_dir for the n - 1 that are later
  // layers' inputs (first_layer numbers the layers in errors). Other policies: RAM, nothing here.
  void allocate_outputs(int n, size_t floats, const MemoryOptions& memory, int first_layer) {
    tier = recomputes_layers() ? memory.tier : MemoryTier::ram;
    offload_dir = memory.offload_dir;
    disk.reset();
    slot_layer[0] = slot_layer[1] = -1;
    slot_ticket[0] = slot_ticket[1] = 0;
    for (FloatBuffer& s : slots) s.resize(0);
    if (!recomputes_layers()) return;
    if (!on_disk()) {
      for (LayerActs& l : layers) l.residual3.resize(floats);
      return;
    }
    for (int s = 0; s < std::min(n, 2); ++s) slots[s].resize(floats);
    if (n > 1)
      disk = std::make_unique<OffloadFile>(offload_dir, n - 1, floats * sizeof(float), "memory.offload_dir",
                                           "the input of layer", first_layer + 1);
  }
  // True when allocate_outputs ran with these options (the policy, the tier and the directory).
  bool allocated_for(const MemoryOptions& memory) const {
    return policy == memory.checkpoint && offload_dir == memory.offload_dir &&
           tier == (recomputes_layers() ? memory.tier : MemoryTier::ram);
  }
  OffloadStats offload() const {
    return disk ? OffloadStats{disk->bytes_written(), disk->bytes_read(), disk->stall_seconds()}
                : OffloadStats{};
  }
  // Everything held in RAM: the layers, the working layer and the slots.
  size_t bytes() const {
    size_t total = work.bytes() + slots[0].bytes() + slots[1].bytes();
    for (const LayerActs& l : layers) total += l.bytes();
    return total;
  }

  // The layer loops' disk-tier steps (no-ops in RAM). Before layer i's forward writes its output: the
  // slot's last write (layer i - 2's output) must be done.
  void claim_output(int i) {
    if (on_disk() && disk) disk->wait(slot_ticket[i % 2]);
    if (on_disk()) slot_layer[i % 2] = i;
  }
  // After layer i's forward (of n): its output goes to disk if a later layer's backward needs it.
  void keep_output(int i, int n) {
    if (on_disk() && disk && i < n - 1) slot_ticket[i % 2] = disk->write(i, slots[i % 2].data());
  }
  // Before layer i's backward: its input (layer i - 1's output) resident, and layer i - 2's output
  // on its way into the slot layer i's output leaves.
  void fetch_input(int i) {
    if (!on_disk() || i == 0) return;
    const int s = (i - 1) % 2;
    if (disk) disk->wait(slot_ticket[s]);
    ODY_CHECK(slot_layer[s] == i - 1, "disk tier: the input of layer {} is not resident (slot holds {})", i,
              slot_layer[s]);
    if (i >= 2) slot_ticket[i % 2] = disk->read(i - 2, slots[i % 2].data()), slot_layer[i % 2] = i - 2;
  }
};

// What the working layer of a recomputing policy holds (model/row_chunks.h): one chunk (`rows`) of its
// token-local activations and, with query-chunked attention, of its qkv (beside the K/V prefix) and
// under full of its attention output and lse (keep_attention hands these to the kept layer whole).
// query_chunks: the attention runs per query chunk (QueryChunks::on, model/query_chunks.h; the K/V
// prefix beside the qkv is added by QueryChunks::with_kv).
inline LayerRows working_rows(CheckpointPolicy policy, int rows, bool query_chunks) {
  const bool full = policy == CheckpointPolicy::full;
  return {rows, rows, true, false, query_chunks ? rows : -1, query_chunks && full ? rows : -1};
}

// What KeptLayers::allocate_outputs holds for n layers' outputs of `floats` each: in RAM (one per
// layer, or two slots on the disk tier), and on disk (the scratch file).
inline size_t kept_output_bytes_for(int n, size_t floats, const MemoryOptions& memory) {
  return size_t(memory.tier == MemoryTier::disk ? std::min(n, 2) : n) * floats * sizeof(float);
}
inline uint64_t kept_output_disk_bytes_for(int n, size_t floats, const MemoryOptions& memory) {
  return memory.tier == MemoryTier::disk && keeps_layer_inputs(memory.checkpoint) && n > 1
             ? OffloadFile::bytes_for(n - 1, floats * sizeof(float))
             : 0;
}

// Runs layers [first, first + n) forward from input; layer i's input is the previous one's output.
template <typename LayerActs, typename Fwd>
void forward_layers(KeptLayers<LayerActs>& k, const float* input, int first, int n, LayerHooks& hooks,
                    int first_unit, Fwd&& fwd) {
  for (int i = 0; i < n; ++i) {
    const int l = first + i;
    hooks.before_forward(first_unit + i);
    const float* x = i == 0 ? input : k.output(size_t(i) - 1);
    LayerActs& la = k.recomputes_layers() ? k.work : k.layers[size_t(i)];
    // The working layer writes its output straight into the kept one (lent, then given back).
    if (k.recomputes_layers()) k.claim_output(i), std::swap(la.residual3, k.output_buffer(size_t(i)));
    if (k.cheap()) la.swap_cheap(k.work);
    fwd(la, x, l);
    if (k.cheap()) la.swap_cheap(k.work);
    if (k.recomputes_layers()) {
      LayerActs& kept = k.layers[size_t(i)];
      std::swap(la.residual3, k.output_buffer(size_t(i)));
      k.keep_output(i, n);
      if (k.keeps_attention()) {  // moved, not copied: the buffers are the same size
        std::swap(la.atty, kept.atty);
        std::swap(la.lse, kept.lse);
        std::swap(la.attention, kept.attention);
      }
      k.work_layer = l;
    }
    hooks.after_forward(first_unit + i);
  }
}

// Runs layers [first, first + n) backward, last first, recomputing what the policy dropped.
template <typename LayerActs, typename Bwd>
void backward_layers(KeptLayers<LayerActs>& k, const float* input, int first, int n, LayerHooks& hooks,
                     int first_unit, Bwd&& bwd) {
  for (int i = n - 1; i >= 0; --i) {
    const int l = first + i;
    hooks.before_backward(first_unit + i);
    if (k.recomputes_layers()) k.fetch_input(i);
    const float* x = i == 0 ? input : k.output(size_t(i) - 1);
    LayerActs& la = k.recomputes_layers() ? k.work : k.layers[size_t(i)];
    if (k.keeps_attention()) {
      LayerActs& kept = k.layers[size_t(i)];
      std::swap(la.atty, kept.atty);
      std::swap(la.lse, kept.lse);
      std::swap(la.attention, kept.attention);
    }
    // Recompute from the layer's input with the forward's own calls (same shapes: same bits). The
    // last layer's qkv and attention are still there from the forward, and with a single chunk all
    // of it.
    Recompute re;
    re.cheap = k.cheap();
    if (k.recomputes_layers()) {
      const bool fresh = k.work_layer == l;
      re.qkv = !fresh;
      re.attention = !fresh && !k.keeps_attention();
      re.token_local = !fresh || k.chunks > 1;
      k.work_layer = -1;  // the backward leaves the working layer's token-local buffers stale
    }
    if (k.cheap()) la.swap_cheap(k.work);
    bwd(la, x, l, re);
    if (k.cheap()) la.swap_cheap(k.work);
    hooks.after_backward(first_unit + i);
  }
}

}  // namespace odyssey
