// The layer loop of a stage's forward and backward, with the activation-checkpointing policies
// (long-context-memory.md §2.2), written once for every architecture. `LayerActs` is a layer's
// activations (BlockActs, model/block.h: residual3 the layer's output, atty and lse the attention's
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
// Recomputing policies keep the last layer's output (the LM head's input, or the stage's output) in
// the stage's d(residual) buffer, which lends it (`lent`): the head turns it into d(output) in place
// (lm_head.h), a stage without the head overwrites it with the d(output) it receives.
//
// The disk tier (memory.tier = disk, keep_attention and full): the layer inputs live in one slot of
// their own and the lent buffer, in turns, and the layer inputs a backward reads back go to a scratch
// file (core/offload_file.h), one record per (layer, row chunk), layer-major, chunk-minor. Layer i's
// output goes to the lent buffer when n - 1 - i is even, else to the slot (i = -1: the embeddings'
// output, layer 0's input, when the stage has the embeddings), so the last layer's output lands in the
// lent buffer and its input in the slot. The I/O thread writes each layer input the backward will read
// back (all but the last layer's, which stays in the slot, and a stage's given input, which is the
// caller's), chunk by chunk, while the next layer reads it; the layer after waits for those writes
// before reusing the buffer. In the backward the lent buffer carries d(residual), so every layer's
// input is read back into the slot, chunk by chunk, while the layer above still runs: its block says
// when it has read a chunk of its own input for the last time (Recompute::input_rows_done, after the
// chunk's input-norm backward), and the I/O thread reads the layer below's record of those rows into
// them, overlapped with the rest of the block's backward. Only what is still in flight when the layer
// below starts is waited for (counted as I/O stall): with chunks walked last first, about one chunk.
// The same bytes come back, checksummed: the arithmetic, and so every bit, is the RAM tier's.
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
#include "odyssey/model/lm_head.h"
#include "odyssey/model/op_observer.h"
#include "odyssey/model/query_chunks.h"
#include "odyssey/model/recompute.h"
#include "odyssey/model/row_chunks.h"
#include "odyssey/model/stage.h"

namespace odyssey {

// The layer inputs the disk tier keeps on disk for n layers: those of layers [embeddings ? 0 : 1, n - 1)
// (the last layer's stays resident, a stage's given input is the caller's).
inline int kept_input_records(int n, bool embeddings) {
  return std::max(0, n - 1 - (embeddings ? 0 : 1));
}

// The scratch file's records for n layers whose inputs have `width` floats per row in row chunks rc:
// one per kept layer input and chunk, layer-major, chunk-minor, in bytes.
inline std::vector<size_t> kept_input_record_bytes(int n, const RowChunks& rc, size_t width,
                                                   bool embeddings) {
  std::vector<size_t> bytes;
  for (int i = 0; i < kept_input_records(n, embeddings); ++i)
    for (int j = 0; j < rc.count(); ++j) bytes.push_back(size_t(rc.size(j)) * width * sizeof(float));
  return bytes;
}

// Which outputs of n layers of a stage a policy keeps in RAM, written once for
// KeptLayers::allocate_outputs and kept_output_bytes_for: a recomputing policy keeps in RAM those of
// the first n - 1 layers (the last one's is in the lent buffer), on disk the slot (when a layer input
// is ever resident in it; embeddings: the stage computes layer 0's input); other policies none here
// (each layer's output is its own residual3).
struct KeptOutputs {
  int layers = 0;
  bool slot = false;
};
inline KeptOutputs kept_outputs(int n, const MemoryOptions& memory, bool embeddings) {
  if (!keeps_layer_inputs(memory.checkpoint)) return {};
  if (memory.tier == MemoryTier::disk) return {0, n > 1 || embeddings};
  return {std::max(n - 1, 0), false};
}

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

  // Recomputing policies: the stage's d(residual) buffer, lent to hold the last layer's output (and on
  // disk every other layer input); on disk also the slot, the tickets of the last I/O request on each
  // (0: slot, 1: lent), the scratch file (null when no input is read back) and the row chunks of its
  // records.
  FloatBuffer* lent = nullptr;
  MemoryTier tier = MemoryTier::ram;
  FloatBuffer slot;
  uint64_t ticket[2] = {0, 0};
  std::unique_ptr<OffloadFile> disk;
  std::string offload_dir;
  bool embeddings = false;      // the stage computes layer 0's input (the embeddings' output, output(-1))
  int first_record = 0;         // the first layer whose input has records (record(i, j))
  RowChunks record_rows{0, 0};  // a layer input's row chunks, one record each
  size_t width = 0;             // floats per row of a layer input
  // The backward's read-back: the layer whose input is being read into the slot (-1: none), and per
  // chunk the rows its block is done with and whether the read is issued.
  int reading = -1;
  std::vector<int> freed;
  std::vector<bool> issued;
  uint64_t late_bytes = 0;  // read back only when the layer needing them began (OffloadStats)
  bool on_disk() const { return tier == MemoryTier::disk; }
  // Whether the embeddings' output is a kept layer input here (on disk) rather than the stage's own.
  static bool keeps_embeddings(const MemoryOptions& memory, bool embeddings) {
    return embeddings && memory.tier == MemoryTier::disk && keeps_layer_inputs(memory.checkpoint);
  }

  // Layer i's output (the stage's i-th layer; the next one's input; i = -1: the embeddings' output on
  // disk), in the forward. On disk: resident only while the layer loops keep it so.
  int buffer_of(int i) const { return (int(layers.size()) - 1 - i) % 2 == 0 ? 1 : 0; }
  FloatBuffer& output_buffer(int i) {
    if (on_disk()) return buffer_of(i) ? *lent : slot;
    return recomputes_layers() && i == int(layers.size()) - 1 ? *lent : layers[size_t(i)].residual3;
  }
  const float* output(int i) const { return const_cast<KeptLayers*>(this)->output_buffer(i).data(); }

  // Room for the outputs of the n layers of rc.N rows x width floats each that a recomputing policy
  // keeps: in RAM per layer but the last (in `lent_buffer`), or on disk in the slot, the lent buffer and
  // a scratch file in memory.offload_dir with a record per row chunk of rc (first_layer numbers the
  // layers in errors; with_embeddings: the stage computes layer 0's input). Other policies: RAM,
  // nothing here.
  void allocate_outputs(int n, const RowChunks& rc, size_t row_width, const MemoryOptions& memory,
                        int first_layer, bool with_embeddings, FloatBuffer& lent_buffer) {
    const size_t floats = size_t(rc.N) * row_width;
    tier = recomputes_layers() ? memory.tier : MemoryTier::ram;
    offload_dir = memory.offload_dir;
    embeddings = with_embeddings;
    disk.reset();
    ticket[0] = ticket[1] = 0;
    reading = -1;
    late_bytes = 0;
    slot.resize(0);
    lent = &lent_buffer;
    record_rows = rc;
    width = row_width;
    const KeptOutputs kept = kept_outputs(n, memory, embeddings);
    for (int i = 0; i < kept.layers; ++i) layers[size_t(i)].residual3.resize(floats);
    if (kept.slot) slot.resize(floats);
    if (!on_disk()) return;
    first_record = embeddings ? 0 : 1;
    std::vector<size_t> bytes = kept_input_record_bytes(n, rc, width, embeddings);
    if (bytes.empty()) return;
    const int u = rc.count(), first = first_layer + first_record;
    disk = std::make_unique<OffloadFile>(
        offload_dir, std::move(bytes), "memory.offload_dir", [rc, u, first](int r) {
          const int j = r % u;
          return fmt::format("the input of layer {}, chunk {} of {} (rows {}..{})", first + r / u, j, u,
                             rc.begin(j), rc.begin(j) + rc.size(j) - 1);
        });
  }
  // True when allocate_outputs ran with these options (the policy, the tier and the directory).
  bool allocated_for(const MemoryOptions& memory) const {
    return policy == memory.checkpoint && offload_dir == memory.offload_dir &&
           tier == (recomputes_layers() ? memory.tier : MemoryTier::ram);
  }
  OffloadStats offload() const {
    return disk ? OffloadStats{disk->bytes_written(), disk->bytes_read(), disk->stall_seconds(), late_bytes}
                : OffloadStats{};
  }
  // Everything held in RAM: the layers, the working layer and the slot (not the lent buffer).
  size_t bytes() const {
    size_t total = work.bytes() + slot.bytes();
    for (const LayerActs& l : layers) total += l.bytes();
    return total;
  }

  // The layer loops' disk-tier steps (no-ops in RAM). Before layer i's forward (i = -1: the
  // embeddings) writes its output: the buffer's last write (layer i - 2's output) must be done.
  void claim_output(int i) {
    if (on_disk() && disk) disk->wait(ticket[buffer_of(i)]);
  }
  // The record of row chunk j of layer i's input.
  int record(int i, int j) const { return (i - first_record) * record_rows.count() + j; }
  float* rows_of(float* buffer, int j) const { return buffer + size_t(record_rows.begin(j)) * width; }
  // After layer i's forward: its output goes to disk, chunk by chunk, if a later layer's backward reads
  // it back.
  void keep_output(int i) {
    const int layer = i + 1, n = int(layers.size());  // whose input it is
    if (!(on_disk() && disk && layer >= first_record && layer < n - 1)) return;
    for (int j = 0; j < record_rows.count(); ++j)
      ticket[buffer_of(i)] = disk->write(record(layer, j), rows_of(output_buffer(i).data(), j));
  }
  // Queues the read of chunk j of the input being read back (`reading`) into its rows of the slot.
  void read_chunk(int j) {
    issued[size_t(j)] = true;
    disk->read(record(reading, j), rows_of(slot.data(), j));
  }
  // Before layer i's backward: its input, resident (the slot, its reads finished), or null when it is
  // the stage's given input. Then layer i - 1's input is read back chunk by chunk as layer i's block
  // is done with the slot's rows (input_rows_done).
  const float* fetch_input(int i) {
    const int n = int(layers.size());
    if (!on_disk()) return i == 0 ? nullptr : output(i - 1);
    if (i == 0 && !embeddings) return nullptr;
    if (i < n - 1) {
      if (reading != i) reading = i, issued.assign(size_t(record_rows.count()), false);
      for (int j = 0; j < record_rows.count(); ++j)
        if (!issued[size_t(j)])  // a chunk the block above did not hand back
          read_chunk(j), late_bytes += disk->record_bytes(record(i, j));
      disk->wait(disk->issued());
    }
    reading = i - 1 >= first_record ? i - 1 : -1;
    freed.assign(size_t(record_rows.count()), 0);
    issued.assign(size_t(record_rows.count()), false);
    return slot.data();
  }
  // Layer i's block will not read rows [r, r + m) of its input again: the chunks of the layer below
  // whose rows are all free are read into them.
  void input_rows_done(int r, int m) {
    if (reading < 0) return;
    for (int j = 0; j < record_rows.count(); ++j) {
      const int b = record_rows.begin(j), e = b + record_rows.size(j);
      const int overlap = std::min(e, r + m) - std::max(b, r);
      if (overlap <= 0 || issued[size_t(j)]) continue;
      freed[size_t(j)] += overlap;
      if (freed[size_t(j)] >= e - b) read_chunk(j);
    }
  }
  // Where the embeddings write their output: on disk the kept layer 0 input (claimed), else `own`.
  float* embeddings_output(FloatBuffer& own) {
    if (!on_disk() || !embeddings) return own.data();
    claim_output(-1);
    return output_buffer(-1).data();
  }
  // After the embeddings: their output goes to disk when layer 0's backward reads it back.
  void keep_embeddings_output() {
    if (on_disk() && embeddings) keep_output(-1);
  }
};

// What allocate_outputs keeps of n layers' outputs of `floats` each in RAM (kept_outputs; the lent
// buffer is the stage's) and on disk (the scratch file).
inline size_t kept_output_bytes_for(int n, size_t floats, const MemoryOptions& memory, bool embeddings) {
  const KeptOutputs kept = kept_outputs(n, memory, embeddings);
  return (size_t(kept.layers) + (kept.slot ? 1 : 0)) * floats * sizeof(float);
}
inline uint64_t kept_output_disk_bytes_for(int n, const RowChunks& rc, size_t width,
                                           const MemoryOptions& memory, bool embeddings) {
  return memory.tier == MemoryTier::disk && keeps_layer_inputs(memory.checkpoint)
             ? OffloadFile::bytes_for(kept_input_record_bytes(n, rc, width, embeddings))
             : 0;
}

// What the working layer of a recomputing policy holds (model/row_chunks.h): one chunk (`rows`) of its
// token-local activations and, with query-chunked attention, of its qkv (beside the K/V prefix) and
// under full of its attention output and lse (keep_attention hands these to the kept layer whole).
// query_chunks: the attention runs per query chunk (QueryChunks::on, model/query_chunks.h; the K/V
// prefix beside the qkv is added by QueryChunks::with_kv).
inline LayerRows working_rows(CheckpointPolicy policy, int rows, bool query_chunks) {
  const bool full = policy == CheckpointPolicy::full;
  return {rows, rows, true, false, query_chunks ? rows : -1, query_chunks && full ? rows : -1};
}

// The LayerRows a stage's layers are allocated with under `policy`, written once for its activations'
// allocate and bytes_for: every kept layer's and, when the policy runs one, the working layer's. none
// keeps every layer whole; cheap keeps all but the cheap group, which it borrows from the working
// layer one chunk at a time; keep_attention keeps a layer's attention output and lse, full nothing
// (both keep the layer's output too: KeptLayers::allocate_outputs), and run one working layer
// (working_rows). rows: a row chunk's rows; q: the attention per query chunk (its K/V prefix beside
// the qkv added here).
struct LayerGroups {
  LayerRows kept;
  bool has_work = false;
  LayerRows work = {};
};
inline LayerGroups layer_groups(CheckpointPolicy policy, int rows, const QueryChunks& q) {
  switch (policy) {
    case CheckpointPolicy::none:
      return {q.with_kv({})};
    case CheckpointPolicy::cheap:
      return {q.with_kv({-1, 0, true, true}), true, {0, rows, false, false}};
    case CheckpointPolicy::keep_attention:
      return {{0, 0, true, false, 0, -1}, true, q.with_kv(working_rows(policy, rows, q.on))};
    case CheckpointPolicy::full:
      return {{0, 0, false, false}, true, q.with_kv(working_rows(policy, rows, q.on))};
    case CheckpointPolicy::automatic:
      break;  // resolved by the trainer: a stage never sees it (LayerStage::set_memory checks)
  }
  fail("memory.checkpoint = auto reached a stage unresolved");
}

// Runs layers [first, first + n) forward from input; layer i's input is the previous one's output.
template <typename LayerActs, typename Fwd>
void forward_layers(KeptLayers<LayerActs>& k, const float* input, int first, int n, LayerHooks& hooks,
                    int first_unit, Fwd&& fwd) {
  for (int i = 0; i < n; ++i) {
    const int l = first + i;
    hooks.before_forward(first_unit + i);
    const float* x = i == 0 ? input : k.output(i - 1);
    LayerActs& la = k.recomputes_layers() ? k.work : k.layers[size_t(i)];
    // The working layer writes its output straight into the kept one (lent, then given back).
    if (k.recomputes_layers()) k.claim_output(i), std::swap(la.residual3, k.output_buffer(i));
    if (k.cheap()) la.swap_cheap(k.work);
    fwd(la, x, l);
    if (k.cheap()) la.swap_cheap(k.work);
    if (k.recomputes_layers()) {
      LayerActs& kept = k.layers[size_t(i)];
      std::swap(la.residual3, k.output_buffer(i));
      k.keep_output(i);
      if (k.keeps_attention()) {  // moved, not copied: the buffers are the same size
        la.swap_attention(kept);
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
    const float* x = k.recomputes_layers() ? k.fetch_input(i) : i == 0 ? nullptr : k.output(i - 1);
    if (!x) x = input;
    LayerActs& la = k.recomputes_layers() ? k.work : k.layers[size_t(i)];
    if (k.keeps_attention()) {
      LayerActs& kept = k.layers[size_t(i)];
      la.swap_attention(kept);
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
      if (k.on_disk()) re.input_rows_done = [&k](int r, int m) { k.input_rows_done(r, m); };
    }
    if (k.cheap()) la.swap_cheap(k.work);
    bwd(la, x, l, re);
    if (k.cheap()) la.swap_cheap(k.work);
    hooks.after_backward(first_unit + i);
  }
}

}  // namespace odyssey
