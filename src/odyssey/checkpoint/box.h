// Checkpoint slices as boxes of the global tensor, so a tensor-parallel shard (a strided set of
// elements in the flat tensor) is stored as it is and read back by any other layout.
//
// A slice is a pair (box, flat range): the box is [lo_d, hi_d) in every dimension d of the global
// tensor, and the slice holds elements [begin, end) of the box's own row-major order. Why the pair:
//   - a 1-D range of the flat tensor (dp, ZeRO, pp) is the whole-tensor box with that range, so the
//     format-2 slices are exactly this with the box left out;
//   - a tensor-parallel rank holds one box per sub-parameter (GPT-2's c_attn: q, k, v), and a ZeRO
//     flat range [lb, le) of its local shard is, in each of those boxes, again one flat range of the
//     box's order (the map from box order to local order is increasing), so every rank writes one
//     slice per sub-parameter it holds, with no union of boxes to describe.
// In the file a slice is stored as its end - begin values, in box order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "odyssey/model/params.h"

namespace odyssey {

struct Box {
  std::vector<int64_t> lo, hi;  // per dimension of the global tensor, [lo, hi)
  int64_t numel() const;
  bool operator==(const Box&) const = default;
};

struct BoxSlice {
  Box box;
  int64_t begin = 0, end = 0;  // elements of the box's row-major order
};

Box whole_box(const std::vector<int64_t>& shape);
std::string box_string(const Box& box);  // "[0:4, 8:12]"

// Where the elements of a slice sit in a buffer: global element x at
// data[base + sum_d (x_d - box.lo_d) * stride_d]. Innermost stride 1.
struct PlacedSlice {
  BoxSlice slice;
  int64_t base = 0;
  std::vector<int64_t> stride;
};

// The slice stored contiguously in box order (as in a checkpoint file): element `begin` at data[0].
PlacedSlice packed(const BoxSlice& slice);

// The slices of the global tensor that local elements [lb, le) of p's piece hold (one per
// sub-parameter with real rows; padding rows belong to none), placed in the piece's local row-major
// memory (data[0] = local element 0).
std::vector<PlacedSlice> held_slices(const ParamInfo& p, int64_t lb, int64_t le);

// [first, last): the row-major flat indices in the global tensor of shape `shape` of the slice's first
// element and one past its last. Every element of the slice lies in it (box order follows global
// order), so slices whose hulls do not meet share no element.
std::pair<int64_t, int64_t> flat_hull(const BoxSlice& slice, const std::vector<int64_t>& shape);

// Copies every element both slices hold (4-byte elements; the buffers may be unaligned); returns how
// many. Streams contiguous runs: nothing outside the two slices is touched. With a null buffer it
// only counts them.
int64_t copy_common(const PlacedSlice& src, const void* src_data, const PlacedSlice& dst, void* dst_data);

// Whether the slices cover the tensor of this shape exactly once. Returns "" when they do, otherwise
// what is wrong ("boxes [..] and [..] overlap", "cover 10 of its 12 elements", a slice outside the
// tensor). Cheap for any tensor size: works on at most 2 * ndim - 1 boxes per slice, not elements.
std::string tiling_problem(const std::vector<int64_t>& shape, const std::vector<BoxSlice>& slices);

}  // namespace odyssey
