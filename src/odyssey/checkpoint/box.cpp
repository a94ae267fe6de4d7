#include "odyssey/checkpoint/box.h"

#include <algorithm>
#include <cstring>

#include "odyssey/core/error.h"

namespace odyssey {
namespace {

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& extent) {
  std::vector<int64_t> s(extent.size(), 1);
  for (size_t d = extent.size(); d-- > 1;) s[d - 1] = s[d] * extent[d];
  return s;
}

std::vector<int64_t> extents(const Box& b) {
  std::vector<int64_t> e(b.lo.size());
  for (size_t d = 0; d < e.size(); ++d) e[d] = b.hi[d] - b.lo[d];
  return e;
}

// Appends proper boxes whose union is elements [begin, end) of b's row-major order; the dimensions
// of b before d have extent 1, so its order is that of dimensions d.. (at most 2 (ndim - d) - 1 boxes).
void decompose(const Box& b, size_t d, int64_t begin, int64_t end, std::vector<Box>& out) {
  if (begin >= end) return;
  if (d == b.lo.size()) return out.push_back(b);  // a single element
  int64_t layer_size = 1;                         // elements of one index of dimension d
  for (size_t k = d + 1; k < b.lo.size(); ++k) layer_size *= b.hi[k] - b.lo[k];
  auto layers = [&](int64_t first, int64_t last) {  // indices [first, last) of dimension d
    Box l = b;
    l.lo[d] = b.lo[d] + first, l.hi[d] = b.lo[d] + last;
    return l;
  };
  const int64_t first = begin / layer_size, last = (end - 1) / layer_size;
  if (first == last)
    return decompose(layers(first, first + 1), d + 1, begin - first * layer_size, end - first * layer_size,
                     out);
  int64_t full_lo = first, full_hi = last + 1;
  if (begin % layer_size != 0) {  // a partial first layer
    decompose(layers(first, first + 1), d + 1, begin % layer_size, layer_size, out);
    ++full_lo;
  }
  if (end % layer_size != 0) {  // a partial last layer
    decompose(layers(last, last + 1), d + 1, 0, end % layer_size, out);
    --full_hi;
  }
  if (full_lo < full_hi) out.push_back(layers(full_lo, full_hi));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + "]";
}

bool overlap(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.lo.size(); ++d)
    if (std::max(a.lo[d], b.lo[d]) >= std::min(a.hi[d], b.hi[d])) return false;
  return true;
}

}  // namespace

int64_t Box::numel() const {
  int64_t n = 1;
  for (size_t d = 0; d < lo.size(); ++d) n *= hi[d] - lo[d];
  return n;
}

Box whole_box(const std::vector<int64_t>& shape) {
  return {std::vector<int64_t>(shape.size(), 0), shape};
}

std::string box_string(const Box& box) {
  std::string s = "[";
  for (size_t d = 0; d < box.lo.size(); ++d) s += fmt::format("{}{}:{}", d ? ", " : "", box.lo[d], box.hi[d]);
  return s + "]";
}

PlacedSlice packed(const BoxSlice& slice) {
  return {slice, -slice.begin, row_major_strides(extents(slice.box))};
}

std::vector<PlacedSlice> held_slices(const ParamInfo& p, int64_t lb, int64_t le) {
  const std::vector<int64_t> local = p.local_shape(), stride = row_major_strides(local);
  if (p.shard.whole()) return {{{whole_box(p.shape), lb, le}, 0, stride}};
  // The piece as [outer, parts x piece rows, inner] around the cut dimension (ParamInfo::for_each_run).
  const TensorShard& s = p.shard;
  const size_t dim = size_t(s.dim);
  const int64_t extent = p.shape[dim], inner = stride[dim];
  const int64_t part = (s.padded ? s.padded : extent) / s.parts, piece = part / s.count;
  const int64_t span = local[dim] * inner;  // local elements per outer index
  std::vector<PlacedSlice> out;
  for (int k = 0; k < s.parts; ++k) {
    const int64_t row = k * part + s.index * piece;
    const int64_t real = std::min(piece, extent - row);  // rows past the real size are padding
    if (real <= 0) continue;
    const int64_t at = k * piece * inner, size = real * inner;  // this part's rows within an outer index
    // How many of the box's elements lie before local element x: the map from box order to local
    // order increases, so local [lb, le) is box order [before(lb), before(le)).
    auto before = [&](int64_t x) {
      const int64_t o = x / span;
      return o * size + std::clamp<int64_t>(x - o * span - at, 0, size);
    };
    Box box = whole_box(p.shape);
    box.lo[dim] = row, box.hi[dim] = row + real;
    const int64_t b = before(lb), e = before(le);
    if (b < e) out.push_back({{box, b, e}, at, stride});
  }
  return out;
}

std::pair<int64_t, int64_t> flat_hull(const BoxSlice& slice, const std::vector<int64_t>& shape) {
  const std::vector<int64_t> ext = extents(slice.box), global = row_major_strides(shape);
  auto flat = [&](int64_t k) {  // global flat index of element k of the box order
    int64_t g = 0;
    for (size_t d = ext.size(); d-- > 0;) {
      g += (slice.box.lo[d] + k % ext[d]) * global[d];
      k /= ext[d];
    }
    return g;
  };
  return {flat(slice.begin), flat(slice.end - 1) + 1};
}

int64_t copy_common(const PlacedSlice& src, const void* src_data, const PlacedSlice& dst, void* dst_data) {
  const Box &a = src.slice.box, &b = dst.slice.box;
  const size_t n = a.lo.size();
  ODY_CHECK(b.lo.size() == n && src.stride.size() == n && dst.stride.size() == n &&
                (n == 0 || (src.stride[n - 1] == 1 && dst.stride[n - 1] == 1)),
            "copy_common: slices of {} and {} dimensions", n, b.lo.size());
  Box in{std::vector<int64_t>(n), std::vector<int64_t>(n)};  // the boxes' intersection
  for (size_t d = 0; d < n; ++d) {
    in.lo[d] = std::max(a.lo[d], b.lo[d]), in.hi[d] = std::min(a.hi[d], b.hi[d]);
    if (in.lo[d] >= in.hi[d]) return 0;
  }
  const std::vector<int64_t> a_order = row_major_strides(extents(a)), b_order = row_major_strides(extents(b));
  // Only the rows (dimension 0) the flat ranges reach.
  if (n > 0) {
    for (const auto* sl : {&src.slice, &dst.slice}) {
      const int64_t layer = sl == &src.slice ? a_order[0] : b_order[0];
      in.lo[0] = std::max(in.lo[0], sl->box.lo[0] + sl->begin / layer);
      in.hi[0] = std::min(in.hi[0], sl->box.lo[0] + (sl->end + layer - 1) / layer);
    }
    if (in.lo[0] >= in.hi[0]) return 0;
  }
  // Runs span dimensions j.. : every dimension after j whole in both boxes and contiguous in both
  // buffers, so a run is contiguous in both orders and both memories.
  size_t j = n == 0 ? 0 : n - 1;
  auto whole_in = [&](const PlacedSlice& p, size_t d) {
    return in.hi[d] - in.lo[d] == p.slice.box.hi[d] - p.slice.box.lo[d] &&
           p.stride[d - 1] == p.stride[d] * (in.hi[d] - in.lo[d]);
  };
  while (j > 0 && whole_in(src, j) && whole_in(dst, j)) --j;
  int64_t run = 1;
  for (size_t d = j; d < n; ++d) run *= in.hi[d] - in.lo[d];

  const auto* from = static_cast<const char*>(src_data);
  auto* to = static_cast<char*>(dst_data);
  std::vector<int64_t> x = in.lo;  // the run's first element; dimensions < j count like an odometer
  int64_t copied = 0;
  while (true) {
    int64_t ka = 0, kb = 0, ma = src.base, mb = dst.base;
    for (size_t d = 0; d < n; ++d) {
      ka += (x[d] - a.lo[d]) * a_order[d], kb += (x[d] - b.lo[d]) * b_order[d];
      ma += (x[d] - a.lo[d]) * src.stride[d], mb += (x[d] - b.lo[d]) * dst.stride[d];
    }
    const int64_t u = std::max({int64_t{0}, src.slice.begin - ka, dst.slice.begin - kb});
    const int64_t w = std::min({run, src.slice.end - ka, dst.slice.end - kb});
    if (u < w) {
      if (from && to) std::memcpy(to + 4 * (mb + u), from + 4 * (ma + u), size_t(w - u) * 4);
      copied += w - u;
    }
    size_t d = j;
    while (d > 0 && ++x[d - 1] == in.hi[d - 1]) x[d - 1] = in.lo[d - 1], --d;
    if (d == 0) break;
  }
  return copied;
}

std::string tiling_problem(const std::vector<int64_t>& shape, const std::vector<BoxSlice>& slices) {
  constexpr int64_t kMaxNumel = int64_t(1) << 50;  // far past any model; keeps the sums exact
  int64_t numel = 1;
  for (int64_t e : shape) {
    if (e < 0 || (e > 0 && numel > kMaxNumel / e))
      return fmt::format("shape {} is not a tensor's", shape_string(shape));
    numel *= e;
  }
  std::vector<Box> boxes;
  int64_t covered = 0;
  for (const BoxSlice& s : slices) {
    const Box& b = s.box;
    bool inside = b.lo.size() == shape.size() && b.hi.size() == shape.size();
    for (size_t d = 0; inside && d < shape.size(); ++d)
      inside = 0 <= b.lo[d] && b.lo[d] < b.hi[d] && b.hi[d] <= shape[d];
    if (!inside || s.begin < 0 || s.begin >= s.end || s.end > b.numel())
      return fmt::format("a slice [{}, {}) of box {} lies outside the tensor or is empty", s.begin, s.end,
                         box_string(b));
    decompose(b, 0, s.begin, s.end, boxes);
    covered += s.end - s.begin;
    if (covered > numel) break;  // overlaps: found below
  }
  // Overlaps: a sweep along dimension 0 compares only boxes whose rows meet.
  std::sort(boxes.begin(), boxes.end(), [](const Box& x, const Box& y) { return x.lo < y.lo; });
  for (size_t i = 0; i < boxes.size(); ++i)
    for (size_t k = i + 1; k < boxes.size() && (shape.empty() || boxes[k].lo[0] < boxes[i].hi[0]); ++k)
      if (overlap(boxes[i], boxes[k]))
        return fmt::format("boxes {} and {} overlap", box_string(boxes[i]), box_string(boxes[k]));
  if (covered != numel) return fmt::format("cover {} of its {} elements", covered, numel);
  return "";
}

}  // namespace odyssey
