// The attention kernel's portable path: 4-float vectors (SSE on x86-64, NEON on ARM), 6 x 2
// micro-tiles, compiled for the build's baseline ISA; it runs on any CPU the build runs on.
#include "odyssey/kernels/attention_isa_prelude.h"
#include "odyssey/kernels/attention_schedule.h"
#include "odyssey/kernels/attention_tiles.h"

namespace odyssey::attention_paths {

using PortableTiles = attention_tiles::MicroTiles<4, 2>;
using PortableKernel = attention_detail::BlockwiseAttention<PortableTiles>;
using PortableBf16Kernel = attention_detail::BlockwiseAttention<PortableTiles, bf16>;
constinit const Path portable = make_path<PortableKernel, PortableBf16Kernel>("portable");

}  // namespace odyssey::attention_paths
