// The dtype `odyssey export --dtype` writes: the adapters export the fp32 master weights (F32, config.json
// torch_dtype "float32"); bf16 rewrites that export with every F32 tensor rounded to BF16 (RNE/FTZ, the
// engine's canonical rounding, core/bf16.h) and torch_dtype "bfloat16" — half the bytes, what a bf16
// run's model copy computes with.
#pragma once

#include <string>

#include "odyssey/core/enum_names.h"

namespace odyssey {

enum class ExportDtype { f32, bf16 };
inline constexpr EnumNames<ExportDtype, 2> kExportDtypeNames = {
    {{"f32", ExportDtype::f32}, {"bf16", ExportDtype::bf16}}};

// out_dir/model.safetensors and out_dir/config.json (an adapter's fp32 export) rewritten, each file
// atomically, in dtype (nothing to do for f32).
void convert_hf_export(const std::string& out_dir, ExportDtype dtype);

}  // namespace odyssey
