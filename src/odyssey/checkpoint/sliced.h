// The universal checkpoint (formats 2 and 3): every tensor stored as slices of its global form, so
// any layout can read what it needs whatever layout wrote it.
//
//   <run dir>/step_00000010/
//     manifest.json                 format version, model config, step, data position, seed/RNG,
//                                   schedule, the layout (dp, ZeRO stage, tp, world size) it was written
//                                   with, and per file: kind, writer rank, bytes, xxh3 and its slices
//                                   (tensor, box, [begin, end) range of the box, byte offset, slice xxh3)
//     params.rank00000.safetensors  fp32 master weights: for every tensor intersecting what rank 0
//     m.rank00000.safetensors       owns, its slices (box.h: a box of the global tensor and a flat range
//     v.rank00000.safetensors       of the box's row-major order, stored in that order); the header
//                                   metadata repeats the global shape, box and range per slice
//     weights.rank00000.safetensors (ZeRO 1-2 with comm.weights only) the quantized model-weight replica
//     ...                           (one file per kind and writing rank)
//
// Format 2 has no boxes: every slice is a 1-D range of the flattened tensor (the whole-tensor box).
// A slice whose box is not the whole tensor (a tensor-parallel shard) is listed with "box" and makes
// the checkpoint format 3, so a build that reads only format 2 refuses it instead of misreading it; a
// checkpoint without tensor parallelism stays format 2. Every global element is stored exactly once:
// a tensor (or a GQA kv head) that several tp ranks hold is written by the first of them (TpPiece).
//
// The ranks write their files in parallel into "<run dir>/.step_00000010.tmp/"; after every rank has
// finished, rank 0 writes the manifest and renames the directory. A directory without a manifest is
// never loaded. Readers check that each kind's slices tile every tensor exactly once (naming the tensor
// otherwise), each file's size against the manifest and each slice's checksum before using it, so
// corruption is reported naming the file and the tensor.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "odyssey/checkpoint/box.h"
#include "odyssey/checkpoint/checkpoint.h"
#include "odyssey/model/params.h"

namespace odyssey {

// The kinds of state a checkpoint holds, each a full set of slices laid out by the table: "params"
// (the master weights), then the optimizer's state by its names (Optimizer::state_names(); AdamW's
// moments "m" and "v") and, optionally (ZeRO 1-2 with quantized weight communication), "weights": the
// model-weight replica the forward uses, which differs from the master by the accumulated quantization
// error. The manifest lists the kinds it holds; readers ignore "weights" when they have no use for it.

// Elements [begin, end) of a buffer laid out by a ParamTable (dense offsets; for a table cut by
// tensor_parallel, offsets into the rank's local shards). data, when set, holds the end - begin
// values of that range.
struct DenseRange {
  int64_t begin = 0, end = 0;
  const float* data = nullptr;
};

// A file one rank wrote: its name in the checkpoint directory, size and whole-file xxh3.
struct WrittenFile {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

std::string checkpoint_step_name(int64_t step);  // "step_00000010"
std::string checkpoint_tmp_dir(const std::string& run_dir, int64_t step);
std::string slice_file_name(const std::string& kind, int rank);  // "params.rank00003.safetensors"

// Of a tensor several tp ranks hold (TpPiece, model/params.h) only the first holder (tp rank 0, or
// the first rank of the kv head's group) writes it.
// Whether this tp rank writes p (see TpPiece). Fails naming the tensor when p's shard is not one
// tensor_parallel(size, rank) cuts.
bool writes_tensor(const ParamInfo& p, const TpPiece& tp);

// Writes this rank's file of one kind: the slice of every tensor the pieces intersect, as boxes of
// the global tensor when the table is tensor-parallel (one slice per sub-parameter and piece), less
// the tensors another tp rank writes. Slices strided in the piece (a column split) are gathered into
// box order first: the file's size of extra memory at most, usually a fraction of it.
WrittenFile write_slice_file(const std::string& tmp_dir, const std::string& kind, int rank,
                             const ParamTable& table, const std::vector<DenseRange>& pieces,
                             const TpPiece& tp = {});

// Rank 0, once every rank's files exist in tmp_dir: writes the manifest (files[k][rank] are the
// writers' reports of kinds[k]; the slices are read back from the headers), renames tmp_dir to the step
// directory and applies retention (keep > 0: the newest keep checkpoints). Returns the directory.
std::string commit_checkpoint(const std::string& run_dir, const std::string& tmp_dir,
                              const CheckpointState& state, const ParamTable& table, int writers,
                              const std::vector<std::string>& kinds,
                              const std::vector<std::vector<WrittenFile>>& files, int keep);

// Fills `ranges` of kind ("params", an optimizer state such as "m", or "weights") in dense (laid out by
// table) from the slices holding them, verifying each slice read. state must come from
// read_checkpoint_manifest of a format-2 or 3 dir. table may be a part of the model's (a pipeline
// stage's): slices of tensors it does not hold are skipped (check_sliced_manifest checks the whole
// model). table may be cut by tensor_parallel (ranges then address the local shards): each element
// is copied from the written slice holding it, whatever layout wrote it; padding rows are not touched.
// Only the slices meeting the ranges are read and verified.
void read_slices(const std::string& dir, const CheckpointState& state, const ParamTable& table,
                 const std::string& kind, const std::vector<DenseRange>& ranges, float* dense);

// Checks a format-2 or 3 manifest against the table: every tensor's global shape, every kind's slices
// (boxes and ranges) covering every tensor exactly once, then every file present with its recorded
// size. Fails naming the file, the kind and the tensor.
// part: the table is a part of the model (a pipeline stage), so the manifest may hold more tensors.
void check_sliced_manifest(const std::string& dir, const CheckpointState& state, const ParamTable* table,
                           bool part = false);

// Verifies the whole-file checksum and every slice checksum of one listed file; returns problems
// (empty: fine). Used by inspect.
std::vector<std::string> verify_slice_file(const std::string& dir, const std::string& file,
                                           const nlohmann::json& info);

}  // namespace odyssey
