// How a kernel with several instruction-set paths picks one: the widest this CPU runs, or the one an
// environment variable names (ODYSSEY_ATTN_ISA, ODYSSEY_BF16_ISA: tests and benchmarks force a path).
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "odyssey/core/error.h"
#include "odyssey/kernels/cpu_info.h"

namespace odyssey {

// paths: the build's paths, widest first, each with `path->name` and `runs_here`. Returns *path of the
// first that runs here, or of the one `env_var` names; refuses a name this build lacks (listing the ones
// it has) or a path this CPU cannot run. what: "an attention path", for the messages.
template <class Support>
const auto& choose_isa_path(const std::vector<Support>& paths, const char* env_var, const char* what) {
  const char* forced = std::getenv(env_var);
  std::string names;
  for (const Support& p : paths) {
    if (!forced || !*forced) {
      if (p.runs_here) return *p.path;
      continue;
    }
    if (p.path->name == std::string_view(forced)) {
      ODY_CHECK(p.runs_here, "{}={}: this CPU ({}) does not support that instruction set", env_var, forced,
                cpu_info().model);
      return *p.path;
    }
    names += names.empty() ? "" : ", ";
    names += p.path->name;
  }
  fail("{}={}: not {} of this build (it has: {})", env_var, forced ? forced : "", what, names);
}

}  // namespace odyssey
