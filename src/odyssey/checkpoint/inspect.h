// `odyssey checkpoint inspect`: a human-readable account of a checkpoint, verifying everything.
#pragma once

#include <ostream>
#include <string>

namespace odyssey {

// path: a checkpoint directory, or a run directory (each checkpoint in it, and every incomplete save
// it holds, which resume ignores). Prints the manifest summary, each tensor's global shape and the
// files and element ranges holding its slices, and verifies every file and slice checksum. Returns
// the number of problems found (an incomplete save inspected directly counts as one; in a run
// directory it is only reported).
int inspect_checkpoint(const std::string& path, std::ostream& out);

}  // namespace odyssey
