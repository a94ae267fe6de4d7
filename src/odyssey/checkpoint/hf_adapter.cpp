#include "odyssey/checkpoint/hf_adapter.h"

#include "odyssey/checkpoint/hf_gpt2.h"
#include "odyssey/checkpoint/hf_llama.h"
#include "odyssey/core/error.h"

namespace odyssey {

namespace {

const HfAdapter kAdapters[] = {
    {Arch::gpt2, "hf-gpt2", read_hf_gpt2_config, import_hf_gpt2, export_hf_gpt2},
    {Arch::llama, "hf-llama", read_hf_llama_config, import_hf_llama, export_hf_llama},
    {Arch::qwen2, "hf-qwen2", read_hf_qwen2_config, import_hf_llama, export_hf_llama},
};

}  // namespace

std::string hf_formats() {
  std::string known;
  for (const HfAdapter& a : kAdapters) known += (known.empty() ? "" : ", ") + std::string(a.format);
  return known;
}

const HfAdapter& hf_adapter_for_format(const std::string& format, const char* option) {
  for (const HfAdapter& a : kAdapters)
    if (format == a.format) return a;
  fail("{}: unknown format '{}' (known: {})", option, format, hf_formats());
}

const HfAdapter& hf_adapter_for_arch(Arch arch) {
  for (const HfAdapter& a : kAdapters)
    if (arch == a.arch) return a;
  fail("model.arch '{}' has no Hugging Face adapter (known formats: {})", enum_name(kArchNames, arch),
       hf_formats());
}

}  // namespace odyssey
